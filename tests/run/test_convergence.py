"""The late slope of the validation loss (ablate.analysis.convergence)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ablate.analysis.convergence import late_change
from ablate.analysis.job import Job


def _job(
    steps: list[int], val_loss: list[float], train_loss: float | None = None, recorded_steps: int | None = None
) -> Job:
    frame = {"val/loss": val_loss}
    if train_loss is not None:  # a noisy training loss at every step: must not be what is measured
        frame["train/loss"] = [train_loss] * len(steps)
    metrics = pd.DataFrame(frame, index=pd.Index(steps, name="step"))
    return Job("j", "j", {}, "completed", record={"steps": recorded_steps or max(steps)}, metrics=metrics)


def test_the_last_two_validations_per_tenth_of_the_run():
    # 1000 steps, validations every 200: the last interval loses 0.05, i.e. 0.025 per 100 steps
    job = _job([199, 399, 599, 799, 999], [3.0, 2.5, 2.2, 2.05, 2.0], recorded_steps=1000)
    assert late_change(job) == pytest.approx(-0.05 / 200 * 100)
    # a flat end is zero whatever came before; a rising one (a run going wrong) is positive
    assert late_change(_job([100, 200, 300], [3.0, 2.0, 2.0])) == 0.0
    assert late_change(_job([100, 200], [2.0, 2.1])) == pytest.approx(0.1 / 100 * 20)


def test_fewer_than_two_validations_is_nan():
    assert math.isnan(late_change(_job([300], [2.0])))
    assert math.isnan(late_change(Job("j", "j", {}, "completed")))
    assert np.isfinite(late_change(_job([150, 300], [2.2, 2.0], train_loss=5.0)))
