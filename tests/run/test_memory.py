"""A training step that cannot fit in memory is refused before any data is read (ablate.run.memory)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ablate.errors import ConfigError
from ablate.run import memory
from ablate.run.plan import check_config

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


# --- issue 32 item 12: the process's limits, not only /proc/meminfo ----------------------------


def test_the_smallest_limit_of_the_process_decides(monkeypatch):
    """16 GiB of RAM, but the job's cgroup leaves 1 GiB: a step of ~3 GiB is refused, naming the cgroup."""
    monkeypatch.setattr(memory, "meminfo_available", lambda: (16 * 2**30, "available RAM"))
    monkeypatch.setattr(memory, "address_space_room", lambda: None)
    monkeypatch.setattr(memory, "slurm_room", lambda: None)
    monkeypatch.setattr(memory, "cgroup_room", lambda: None)
    cfg = composed("data.batch_size=512")
    check_config(cfg)  # fits the RAM
    monkeypatch.setattr(memory, "cgroup_room", lambda: (2**30, "room under the cgroup memory limit of 1.0 GiB"))
    with pytest.raises(ConfigError, match=r"more than the 1\.0 GiB of room under the cgroup memory limit"):
        check_config(composed("data.batch_size=512"))


def test_cgroup_limits_are_read_for_v1_and_v2_and_their_parents(tmp_path):
    v2 = tmp_path / "v2"
    (v2 / "job" / "step").mkdir(parents=True)
    (v2 / "job" / "memory.max").write_text(str(3 * 2**30))
    (v2 / "job" / "memory.current").write_text(str(2**30))
    (v2 / "job" / "step" / "memory.max").write_text("max")
    (tmp_path / "cgroup2").write_text("0::/job/step\n")
    room, where = memory.cgroup_room(tmp_path / "cgroup2", v2)
    assert room == 2 * 2**30 and "cgroup memory limit of 3.0 GiB" in where and "job/memory.max" in where
    v1 = tmp_path / "v1" / "memory" / "slurm"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(str(2**31))
    (v1 / "memory.usage_in_bytes").write_text("0")
    (v1.parent / "memory.limit_in_bytes").write_text("9223372036854771712")  # unlimited, as v1 writes it
    (tmp_path / "cgroup1").write_text("4:memory:/slurm\n0::/\n")
    assert memory.cgroup_room(tmp_path / "cgroup1", tmp_path / "v1")[0] == 2**31
    (tmp_path / "none").write_text("0::/\n")
    assert memory.cgroup_room(tmp_path / "none", tmp_path / "empty") is None


def test_slurm_memory_is_a_limit():
    assert memory.slurm_room({}) is None
    room, where = memory.slurm_room({"SLURM_MEM_PER_CPU": "1024", "SLURM_CPUS_ON_NODE": "4"})
    assert room <= 4 * 2**30 and "--mem-per-cpu" in where
    assert memory.slurm_room({"SLURM_MEM_PER_NODE": "2048"})[0] <= 2 * 2**30


@pytest.mark.integration
def test_an_address_space_limit_is_read_from_the_process():
    """What `prlimit --as` does: the limit is set in the child, which reports it as its room."""
    import resource
    import subprocess
    import sys

    limit = 6 * 2**30

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))

    probe = "from ablate.run import memory; room, where = memory.available_bytes('cpu'); print(int(room)); print(where)"
    proc = subprocess.run(
        [sys.executable, "-c", probe], preexec_fn=limited, capture_output=True, text=True, timeout=600, check=True
    )
    room, where = proc.stdout.strip().splitlines()
    assert 0 < int(room) < limit and "address-space limit of 6.0 GiB" in where
