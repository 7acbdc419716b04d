"""A callback for the fault-injection tests: send this process a signal after a given optimiser
step, as a user's Ctrl-C (SIGINT) or a scheduler (SIGTERM) would. With ``once_file`` it fires only
if that file does not exist yet (and creates it), so re-running the same command is not
interrupted again."""

import os
import signal
from pathlib import Path

from lightning.pytorch.callbacks import Callback


class SignalAtStep(Callback):
    def __init__(self, step: int, signum: int = int(signal.SIGINT), once_file: str | None = None) -> None:
        self.step, self.signum, self.once_file = step, signum, once_file

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.step:
            return
        if self.once_file is not None:
            if Path(self.once_file).exists():
                return
            Path(self.once_file).touch()
        os.kill(os.getpid(), self.signum)
