"""A freshly built model is the one recorded (main 780a50a, re-recorded for issue 50's scale contract): the same parameter
names, shapes and initial values, and the same loss and gradients on a fixed batch, for every
registered option of every axis (decoder-only and encoder-decoder), the default experiment, the
translation default and GPT-2 small (``tests/helpers/fingerprints.py``, ``tests/nn/fingerprints.json``).

Two comparisons, in one test that runs (and skips nothing) on every machine: the numbers within a
tolerance relative to their scale; and, on a machine whose CPU model, vector ISA and torch are
exactly those of a recording, the hashes as well, to the bit. ``ABLATE_FINGERPRINTS=tolerance``
leaves out the bitwise one, as on any other machine.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import pytest

from helpers.fingerprints import (
    FIXTURE,
    LARGE,
    cases,
    exact_hashes,
    fingerprint,
    layout_names,
    this_machine,
    within_tolerance,
)

RECORDED = json.loads(FIXTURE.read_text())
EXACT = None if os.environ.get("ABLATE_FINGERPRINTS") == "tolerance" else exact_hashes(RECORDED, this_machine())
CASES = cases(include_large=True)


@functools.cache
def _fingerprint(name: str) -> dict[str, Any]:
    """Computed once per model (a file runs on one worker: --dist loadfile)."""
    return fingerprint(*CASES[name])


def _param(name: str):
    marks = [pytest.mark.integration] if name in LARGE else []  # seconds: the full suite only
    return pytest.param(name, id=name, marks=marks)


MODELS = [_param(n) for n in RECORDED["models"]]


def test_every_recorded_model_is_still_built() -> None:
    """A model added since (a new option) has no record and needs none; none may go missing."""
    assert set(RECORDED["models"]) <= set(CASES)


@pytest.mark.parametrize("name", MODELS)
def test_built_model_matches_its_recorded_numbers(name: str) -> None:
    """Within the tolerance on every machine; to the bit as well where this machine has a recording
    (no test is skipped elsewhere: the bitwise half is part of this one)."""
    expected = RECORDED["models"][name]
    got = _fingerprint(name)
    assert layout_names(got) == RECORDED["layouts"][expected["layout"]], "parameter names or shapes changed"
    assert within_tolerance(got, expected) == []
    if EXACT is not None:  # a recording of this CPU model, vector ISA and torch
        hashes = EXACT[name]
        assert got["state_sha256"] == hashes["state_sha256"], "initial weights changed"
        assert got["loss"] == hashes["loss"], (float.fromhex(got["loss"]), float.fromhex(hashes["loss"]))
        assert got["grad_sha256"] == hashes["grad_sha256"], "gradients changed"


def test_hashes_are_compared_only_on_exactly_the_recording_machine() -> None:
    """The same torch and vector ISA on another CPU model (the recording machine against an AMD EPYC:
    the gradients differ in the last bits) is not the same machine; nor is an unknown CPU model."""
    machine = RECORDED["machines"][-1]["recorded_on"]
    assert exact_hashes(RECORDED, machine) is RECORDED["machines"][-1]["hashes"]
    for key, other in (("cpu_model", "Intel(R) Xeon(R) (family 6, model 85, stepping 7)"), ("torch", "2.13.1+cpu")):
        assert exact_hashes(RECORDED, {**machine, key: other}) is None
    assert exact_hashes(RECORDED, {**machine, "cpu_model": None}) is None  # an unknown CPU model matches none


def test_the_tolerance_is_relative_to_the_scale_and_catches_a_changed_number() -> None:
    """Last-bit noise summed over a large cancelling checksum passes; a change the size of one changed
    weight does not."""
    expected = RECORDED["models"]["default"]
    noisy = {**expected, "grad_sum": expected["grad_sum"] + 3e-8 * expected["grad_scale"]}
    assert within_tolerance(noisy, expected) == []
    for key, moved in (
        ("grad_sum", expected["grad_sum"] + 1e-4 * expected["grad_scale"]),
        ("state_sum", expected["state_sum"] - 1e-4 * expected["state_scale"]),
        ("loss", (float.fromhex(expected["loss"]) * (1 + 1e-4)).hex()),
    ):
        assert [w.split()[0] for w in within_tolerance({**expected, key: moved}, expected)] == [key]
