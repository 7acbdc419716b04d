"""Divergence detection without a host sync per step (issue 31): the test runs on the device and
is read every ``check_every_n_steps`` steps, and the recorded step is still the first one whose
loss failed."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from ablate.callbacks.divergence import DivergenceMonitor

NAN, INF = math.nan, math.inf


def fake_trainer(every: int, logged: list) -> SimpleNamespace:
    return SimpleNamespace(
        global_step=0,
        log_every_n_steps=every,
        should_stop=False,
        max_steps=100,
        loggers=[SimpleNamespace(log_metrics=lambda metrics, step: logged.append((metrics, step)))],
        strategy=SimpleNamespace(reduce=lambda x, reduce_op: x),  # one process
    )


def train(monitor: DivergenceMonitor, losses: list[float], every: int, start: int = 1):
    """Feed one loss per step; returns (the step training stopped at, what was logged)."""
    logged: list = []
    trainer = fake_trainer(every, logged)
    for step, loss in enumerate(losses, start):
        trainer.global_step = step
        monitor.on_train_batch_end(trainer, None, {"loss": torch.tensor(loss)}, None, step - 1)  # type: ignore[arg-type]
        if trainer.should_stop:
            break
    return trainer.global_step, logged


@pytest.mark.filterwarnings("ignore:run diverged")
@pytest.mark.parametrize(
    ("losses", "reason"),
    [
        ([4.0, 3.0, NAN, 2.0, 2.0, 2.0, 2.0], "non-finite loss (nan)"),
        ([4.0, 3.0, -INF, 2.0, 2.0, 2.0, 2.0], "non-finite loss (-inf)"),
        ([4.0, 3.0, 41.0, 2.0, 2.0, 2.0, 2.0], "loss 41 > 10.0 x initial 4"),
    ],
)
def test_the_first_failed_step_is_recorded_and_training_stops_at_the_next_check(losses, reason) -> None:
    monitor = DivergenceMonitor(max_ratio=10.0)
    stopped, logged = train(monitor, losses, every=5)
    assert (monitor.diverged_at, monitor.reason, stopped) == (3, reason, 5)
    assert logged == [({"diverged": 1.0}, 3)]  # logged at the step it names


@pytest.mark.filterwarnings("ignore:run diverged")
def test_a_non_finite_first_loss_diverges_at_step_one() -> None:
    monitor = DivergenceMonitor(max_ratio=10.0)
    assert train(monitor, [INF, 3.0, 2.0], every=2)[0] == 2 and monitor.diverged_at == 1


def test_a_loss_below_the_ratio_or_without_one_is_not_divergence() -> None:
    monitor = DivergenceMonitor(max_ratio=10.0)
    assert train(monitor, [4.0, 39.0, 2.0, 2.0], every=2) == (4, []) and monitor.diverged_at is None
    assert monitor.initial_loss == 4.0
    without = DivergenceMonitor(max_ratio=None)
    assert train(without, [4.0, 1e30, 2.0, 2.0], every=2)[1] == [] and without.diverged_at is None


@pytest.mark.filterwarnings("ignore:run diverged")
def test_a_checkpoint_between_the_failure_and_its_check_keeps_the_first_step() -> None:
    """A run saved (and resumed) after the failed step but before the check names that step."""
    before = DivergenceMonitor(max_ratio=10.0)
    train(before, [4.0, 3.0, NAN, 2.0], every=5)  # steps 1-4: no check yet
    assert before.diverged_at is None
    resumed = DivergenceMonitor(max_ratio=10.0)
    resumed.load_state_dict(before.state_dict())
    stopped, logged = train(resumed, [2.0], every=5, start=5)
    assert (resumed.diverged_at, stopped, resumed.initial_loss) == (3, 5, 4.0)


def test_a_step_between_checks_costs_one_copy_on_the_device() -> None:
    """The per-step work is appending the loss to the device window: one kernel (a copy), no host
    read, no collective; the test itself runs at the checks (issue 39: 1.8 ms of host time per
    step on a GPU for a few scalar kernels a step)."""
    from torch.overrides import TorchFunctionMode

    class Ops(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.names: list[str] = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.names.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    reduced: list = []
    trainer = fake_trainer(every=5, logged=[])
    trainer.strategy = SimpleNamespace(reduce=lambda x, reduce_op: reduced.append(x) or x)
    monitor = DivergenceMonitor(max_ratio=10.0)
    loss = torch.tensor(4.0)
    for step in (1, 2):  # the first step builds the window
        trainer.global_step = step
        ops = Ops()
        with ops:
            monitor.on_train_batch_end(trainer, None, {"loss": loss}, None, step - 1)  # type: ignore[arg-type]
    launched = [n for n in ops.names if n not in ("__get__", "__len__", "__getitem__", "detach")]  # views, metadata
    assert launched == ["copy_"], ops.names
    assert not reduced  # the average over ranks is taken at the check, for the whole window
    trainer.global_step = 5
    for step in (3, 4, 5):
        trainer.global_step = step
        monitor.on_train_batch_end(trainer, None, {"loss": loss}, None, step - 1)  # type: ignore[arg-type]
    assert len(reduced) == 1 and reduced[0].tolist() == [4.0] * 5  # one reduction per check
