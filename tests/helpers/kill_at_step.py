"""A callback for tests/run/test_resume.py: SIGKILL the training process after a given optimiser step,
as a scheduler or an OOM killer would: no exception, no cleanup, no final checkpoint.

Lightning runs checkpoint callbacks after all others, so at a step that is also a checkpoint step
the process dies before that checkpoint is written."""

import os
import signal

from lightning.pytorch.callbacks import Callback


class KillAtStep(Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)
