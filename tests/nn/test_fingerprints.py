"""A freshly built model is the one main built before the one-Stack refactoring, to the bit: the
same parameter names, shapes and initial values, and the same loss and gradients on a fixed batch,
for every registered option of every axis (decoder-only and encoder-decoder), the default
experiment, the translation default and GPT-2 small (``tests/helpers/fingerprints.py``,
``tests/nn/fingerprints.json``).

On a machine whose CPU kernels differ from the recording machine's (another vector ISA, another
torch), random fills and matmuls may differ in the last bits: there the float checksums are
compared with a tight tolerance instead of the hashes.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from helpers.fingerprints import FIXTURE, LARGE, cases, fingerprint

RECORDED = json.loads(FIXTURE.read_text())
SAME_KERNELS = RECORDED["recorded_on"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and RECORDED[
    "recorded_on"
]["torch"] == str(torch.__version__)
CASES = cases(include_large=True)


def _param(name: str):
    marks = [pytest.mark.integration] if name in LARGE else []  # seconds: the full suite only
    return pytest.param(name, id=name, marks=marks)


def test_every_recorded_model_is_still_built() -> None:
    """A model added since (a new option) has no record and needs none; none may go missing."""
    assert set(RECORDED["models"]) <= set(CASES)


@pytest.mark.parametrize("name", [_param(n) for n in RECORDED["models"]])
def test_built_model_matches_its_recorded_fingerprint(name: str) -> None:
    expected = RECORDED["models"][name]
    got = fingerprint(*CASES[name])
    layout = [f"{n} {'x'.join(map(str, shape))}" for n, shape in got["layout"]]
    assert layout == RECORDED["layouts"][expected["layout"]], "parameter names or shapes changed"
    if SAME_KERNELS:
        assert got["state_sha256"] == expected["state_sha256"], "initial weights changed"
        assert got["loss"] == expected["loss"], (float.fromhex(got["loss"]), float.fromhex(expected["loss"]))
        assert got["grad_sha256"] == expected["grad_sha256"], "gradients changed"
    else:
        assert math.isclose(got["state_sum"], expected["state_sum"], rel_tol=1e-6, abs_tol=1e-6)
        assert math.isclose(float.fromhex(got["loss"]), float.fromhex(expected["loss"]), rel_tol=1e-5)
        assert math.isclose(got["grad_sum"], expected["grad_sum"], rel_tol=1e-4, abs_tol=1e-6)
