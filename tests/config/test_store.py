"""The architecture groups live in Hydra's ConfigStore (ablate.config.store), not beside a checkout:
a ``conf/`` folder with no ``src/`` next to it (an installed package's user, who copied train.py and
conf/) composes ``pos=rope`` all the same, in process and through ``train.py`` (Hydra's plugin scan
imports hydra_plugins.ablate_sweepers, which registers them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import ablate.run.config  # noqa: F401  (what the entry points import before they compose)
from helpers.runs import REPO, SHARED_DATA, TINY, run_python


def _elsewhere(tmp_path: Path) -> Path:
    """train.py and conf/ copied into a folder without src/."""
    shutil.copytree(REPO / "conf", tmp_path / "conf")
    shutil.copy(REPO / "train.py", tmp_path / "train.py")
    assert not (tmp_path / "src").exists()
    return tmp_path


def test_a_conf_folder_without_src_beside_it_composes_the_groups(tmp_path: Path) -> None:
    folder = _elsewhere(tmp_path)
    with initialize_config_dir(config_dir=str(folder / "conf"), version_base="1.3"):
        cfg = compose("train", ["pos=rope", "pos.fraction=0.5"])
    assert (cfg.pos.name, cfg.pos.fraction, cfg.pos.base) == ("rope", 0.5, 10000.0)
    assert (cfg.norm.placement, cfg.act.name, cfg.init.name, cfg.attn.impl) == ("pre", "gelu", "xavier", "sdpa")


@pytest.mark.integration
def test_train_py_elsewhere_composes_pos_rope(tmp_path: Path) -> None:
    folder = _elsewhere(tmp_path / "run")
    proc = run_python(folder, "train.py", "pos=rope", "--cfg", "job")
    assert proc.returncode == 0, proc.stderr
    assert "pos:\n  name: rope\n  base: 10000.0\n  fraction: 1.0" in proc.stdout


@pytest.mark.integration
def test_an_installed_copy_runs_pos_rope_from_another_directory(tmp_path: Path, monkeypatch) -> None:
    """The package copied out of the checkout (what ``pip install .`` leaves in site-packages: no
    ``conf/`` above it) runs the checkout's train.py from an unrelated folder: the command line's
    check composes the same ``conf/`` as ``@hydra.main`` (it looked in the working directory)."""
    site = tmp_path / "site"
    for package in ("ablate", "hydra_plugins"):
        shutil.copytree(REPO / "src" / package, site / package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("ABLATE_DATA_DIR", str(SHARED_DATA))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = run_python(elsewhere, "-c", "import ablate.config.locations as l; print(l.__file__, l.checkout_root())")
    assert probe.stdout.split() == [str(site / "ablate" / "config" / "locations.py"), "None"], probe.stderr
    proc = run_python(elsewhere, str(REPO / "train.py"), "pos=rope", *TINY)
    assert proc.returncode == 0, proc.stderr
    assert "run completed" in proc.stdout
    (config,) = (elsewhere / "logs").glob("**/.hydra/config.yaml")
    assert "name: rope" in config.read_text()


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def _schema_defaults(name: str) -> dict:
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.structured(ConfigStore.instance().load(f"schema/{name}.yaml").node))


def test_the_optim_defaults_live_once_in_its_section() -> None:
    """conf/optim/*.yaml extend schema/optim (OptimConfig's keys and defaults): optim=adamw is the
    section's defaults, and every file sets only what differs from them."""
    import dataclasses

    from omegaconf import OmegaConf

    from ablate.run.config import OptimConfig

    defaults = dataclasses.asdict(OptimConfig())
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        composed = OmegaConf.to_container(compose("train").optim)
    assert composed == {k: _plain(v) for k, v in defaults.items()}
    for path in sorted((REPO / "conf" / "optim").glob("*.yaml")):
        node = OmegaConf.to_container(OmegaConf.load(path))
        assert node.pop("defaults") == ["/schema/optim@_here_", "_self_"], path.name
        same = [k for k, v in node.items() if v == _plain(defaults[k])]
        assert not same, f"{path.name} repeats the defaults of {same}"


# (file, the node of the file that extends the schema, schema, where the schema is merged)
EXTENDED = [
    *((f"model/{p.stem}.yaml", "", "model", "_here_") for p in (REPO / "conf" / "model").glob("*.yaml")),
    ("train.yaml", "", "run", "_here_"),
    *(("train.yaml", s, s, s) for s in ("eval", "log", "runtime")),
    ("task/translation.yaml", "task", "task_translation", "task"),
    ("task/translation.yaml", "decode", "decode", "decode"),
    *((f"logger/{name}.yaml", name, f"logger_{name}", name) for name in ("wandb", "tensorboard", "mlflow")),
    ("logger/csv.yaml", "wandb", "logger_wandb", "wandb"),
]


@pytest.mark.parametrize(("path", "key", "schema", "package"), EXTENDED)
def test_every_default_lives_once_in_its_dataclass(path: str, key: str, schema: str, package: str) -> None:
    """The model and logger files, train.yaml's own keys and sections, and task=translation's task and
    decode keys extend their schema (dataclasses in ConfigStore: ablate.run.config) and set only what
    differs."""
    from omegaconf import OmegaConf

    text = OmegaConf.to_container(OmegaConf.load(REPO / "conf" / path))
    entries = [e for e in text.get("defaults", []) if isinstance(e, str) and e.startswith("/schema/")]
    if schema == "model":  # a decoder (n_layers) or an encoder-decoder (encoder_layers, decoder_layers)
        schema = "model_seq2seq" if "encoder_layers" in text else "model"
    assert f"/schema/{schema}@{package}" in entries, (path, entries)
    defaults = _schema_defaults(schema)
    node = text.get(key, {}) if key else text
    same = [k for k, v in node.items() if k in defaults and v == _plain(defaults[k])]
    assert not same, f"{path} repeats the defaults of {same}"
