"""A training step that cannot fit in memory is refused before any data is read (ablate.run.memory)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ablate.config.options import ConfigError
from ablate.run import memory
from ablate.run.preflight import check_config

REPO = Path(__file__).resolve().parents[2]


def composed(*overrides: str):
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return compose("train", overrides=list(overrides))


def test_a_huge_batch_is_refused_with_the_estimate_and_the_micro_batch_that_fits(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda accelerator: (16 * 2**30, "available RAM"))
    with pytest.raises(ConfigError) as err:
        check_config(composed("data.batch_size=100000"))
    message = str(err.value)
    assert "more than the 16.0 GiB of available RAM" in message and "micro-batch of 100000" in message
    fits = int(message.split("data.micro_batch_size to at most ")[1].split()[0])
    assert 0 < fits < 100000
    # the advice holds: at that micro-batch (same global batch) the check passes, one more does not
    check_config(composed("data.batch_size=100000", f"data.micro_batch_size={_divisor_at_most(100000, fits)}"))


def _divisor_at_most(n: int, limit: int) -> int:
    return max(d for d in range(1, limit + 1) if n % d == 0)


def test_the_default_experiment_fits_a_small_machine(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda accelerator: (2 * 2**30, "available RAM"))
    check_config(composed())


def test_estimate_parts_scale_as_documented():
    small = memory.estimate(10**6, 4, 128, 512, 4, 128, 65, micro_batch=8)
    assert small.weights_and_grads == 8e6 and small.optimizer == 8e6  # AdamW: two fp32 moments
    assert memory.estimate(10**6, 4, 128, 512, 4, 128, 65, 8, optimizer="sgd").optimizer == 4e6
    math = memory.estimate(10**6, 4, 128, 512, 4, 128, 65, 8, materialised_attention=True)
    assert math.activations_per_sequence > small.activations_per_sequence  # s x s attention matrices
    half = memory.estimate(10**6, 4, 128, 512, 4, 128, 65, 8, precision="bf16-mixed")
    assert half.activations_per_sequence == pytest.approx(small.activations_per_sequence / 2)
    assert small.largest_micro_batch(small.total) == 8
