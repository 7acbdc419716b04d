"""Every experiment config composes and describes valid jobs: for each `conf/experiment/*.yaml`
and each value of each axis its own sweep (`hydra.sweeper.params`) names, the composed config
passes the architecture validation and the batch-layout check that `train.py` runs before any
data is read. Paper-scale experiments cannot be trained here; this is what keeps them runnable."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ablate.run.plan import check_config, training_layout

CONF = Path(__file__).resolve().parents[2] / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
# the reproduction experiments the issues name: a paper-scale and a `_cpu` version each
REPRODUCTIONS = ["xiong2020_prenorm", "vaswani2017_table3", "shazeer2020_glu", "press2022_alibi", "depth_stability"]


@pytest.fixture(scope="module")
def hydra_init():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield


def sweep_values(name: str) -> list[list[str]]:
    """One override list per value of each swept axis of the experiment (not the product)."""
    cfg = compose(config_name="train", overrides=[f"experiment={name}"], return_hydra_config=True)
    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    jobs = [[]]
    for key, values in params.items():
        jobs += [[f"{key}={value.strip()}"] for value in str(values).split(",")]
    return jobs


def test_every_reproduction_has_both_scales():
    for name in REPRODUCTIONS:
        assert name in EXPERIMENTS and f"{name}_cpu" in EXPERIMENTS, name
        assert (CONF.parent / "experiments" / name / "README.md").exists(), name


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_jobs_are_valid(hydra_init, name):
    jobs = sweep_values(name)
    for extra in jobs:
        cfg = compose(config_name="train", overrides=[f"experiment={name}", *extra])
        check_config(cfg)  # raises ConfigError naming the fix
        training_layout(cfg)
    if name.endswith("_cpu"):
        assert len(jobs) > 1, f"{name}: a _cpu experiment should carry its sweep in hydra.sweeper.params"
