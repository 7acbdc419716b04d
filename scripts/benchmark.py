"""Measure the training speed of the configured experiment and check the overhead budgets.

    python scripts/benchmark.py                                 # the default experiment
    python scripts/benchmark.py model.n_layers=2 data.seq_len=64 benchmark.compile=true
    python scripts/benchmark.py trainer=gpu model=gpt2_small data.seq_len=1024 benchmark.compile=true
    python scripts/benchmark.py benchmark.only=[startup]        # time to the first line (benchmarks.startup)

Config: ``conf/benchmark.yaml`` (it composes ``conf/train.yaml``). The runner, the hand-written
reference loop and the report are in ``benchmarks/`` (beside ``src/``: not installed);
``experiments/benchmarks/README.md`` explains every number.
"""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from ablate import cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ sits beside src/: not installed

from benchmarks.suite import main as run_benchmark


@hydra.main(version_base="1.3", config_path="../conf", config_name="benchmark")
@cli.task
def main(cfg: DictConfig) -> None:
    if list(cfg.benchmark.get("only") or []) == ["startup"]:  # time to the first line (benchmarks.startup)
        from benchmarks.startup import main as run_startup

        run_startup(cfg)
        return
    run_benchmark(cfg)


if __name__ == "__main__":
    cli.entry_point(main, "benchmark")
