"""A clock the test sets by hand and a stand-in for the Lightning Trainer, with what the progress and
throughput callbacks read of it."""

from __future__ import annotations

from types import SimpleNamespace


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fake_trainer(max_steps: int = 100, log_every_n_steps: int = 10) -> SimpleNamespace:
    return SimpleNamespace(
        global_step=0,
        max_steps=max_steps,
        log_every_n_steps=log_every_n_steps,
        is_global_zero=True,
        sanity_checking=False,
        state=SimpleNamespace(fn="fit"),
        optimizers=[],
        callback_metrics={"train/loss": 2.5, "train/lr": 1e-3, "train/tokens_per_sec": 17_100.0},
        logged_metrics={},
    )
