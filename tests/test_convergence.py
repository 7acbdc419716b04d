"""The change of the training loss over the last 10% of a run (ablate.analysis.convergence)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ablate.analysis.convergence import late_change
from ablate.analysis.runs import Job


def _job(steps: np.ndarray, loss: np.ndarray, recorded_steps: int | None = None) -> Job:
    metrics = pd.DataFrame({"train/loss": loss}, index=pd.Index(steps, name="step"))
    return Job("j", "j", {}, "completed", record={"steps": recorded_steps or int(steps.max())}, metrics=metrics)


def test_a_straight_line_gives_its_change_over_the_last_tenth():
    steps = np.arange(10, 1001, 10)
    # falls by 1e-3 a step over the last 300 steps, flat before: the last 100 steps lose 0.1
    loss = np.where(steps < 700, 3.0, 3.0 - 1e-3 * (steps - 700))
    assert late_change(_job(steps, loss)) == pytest.approx(-0.1)


def test_noise_averages_out_and_a_flat_curve_gives_zero():
    rng = np.random.default_rng(0)
    steps = np.arange(1, 2001)
    flat = 2.0 + 0.05 * rng.standard_normal(len(steps))
    assert abs(late_change(_job(steps, flat))) < 0.02  # the first-to-last difference would be ~0.07 of noise
    # a rising curve (a run going wrong) is positive
    assert late_change(_job(steps, 2.0 + 1e-4 * steps)) == pytest.approx(0.02)


def test_too_few_points_in_the_window_is_nan():
    steps = np.array([100, 500, 1000])
    assert math.isnan(late_change(_job(steps, np.array([3.0, 2.0, 1.0]))))
    assert math.isnan(late_change(Job("j", "j", {}, "completed")))
