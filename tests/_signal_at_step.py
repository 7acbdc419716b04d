"""A callback for the fault-injection tests: send this process a signal after a given optimiser
step, as a user's Ctrl-C (SIGINT) or a scheduler (SIGTERM) would."""

import os
import signal

from lightning.pytorch.callbacks import Callback


class SignalAtStep(Callback):
    def __init__(self, step: int, signum: int = int(signal.SIGINT)) -> None:
        self.step, self.signum = step, signum

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)
