"""Where the folders are: one rule in the package (ablate.config.locations), needing no Hydra runtime config."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from ablate.config import locations

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_env(monkeypatch):
    for name in (locations.ENV_ROOT, locations.ENV_DATA_DIR, locations.ENV_CACHE_DIR, locations.ENV_LOG_DIR):
        monkeypatch.delenv(name, raising=False)


def test_the_root_is_this_checkout_from_any_working_directory(no_env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert locations.project_root() == REPO
    assert locations.log_dir() == REPO / "logs"
    assert locations.cache_dir() == REPO / "cache"


def test_data_dir_prefers_the_variable_then_the_shared_corpora_then_root_data(no_env, tmp_path, monkeypatch):
    root = tmp_path / "checkout"
    root.mkdir()
    assert locations.data_dir(root) == root / "data"
    (tmp_path / "shared" / "data").mkdir(parents=True)
    assert locations.data_dir(root) == (tmp_path / "shared" / "data").resolve()
    monkeypatch.setenv(locations.ENV_DATA_DIR, str(tmp_path / "mine"))
    assert locations.data_dir(root) == tmp_path / "mine"


def test_the_sweep_dir_resolves_before_hydra_sets_its_config(no_env):
    """Hydra's basic sweeper reads ``hydra.sweep.dir`` before any job, with no HydraConfig set:
    ``paths.root_dir: ${hydra:runtime.cwd}`` made every ``train.py -m`` without path overrides fail."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=["norm=post"], return_hydra_config=True)
    HydraConfig.instance().cfg = None  # as in the sweeper: not set yet
    sweep_dir = OmegaConf.select(cfg, "hydra.sweep.dir")
    assert Path(sweep_dir).parent == REPO / "logs" / "multirun"
    assert cfg.paths.data_dir == str(locations.data_dir(REPO))
