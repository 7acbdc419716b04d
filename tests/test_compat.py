"""The private Hydra and Lightning names we rely on (src/ablate/compat.py) still exist in the pinned
versions, and no other module reaches for one: an upgrade that moves a name fails here, by name."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest
from lightning.fabric.utilities.logger import _flatten_dict
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.loggers import CSVLogger

from ablate.compat import BasicSweeper, flatten_params, hydra_args_parser, is_local_path

REPO = Path(__file__).resolve().parents[1]


def private_imports(source: str) -> list[str]:
    """The private Hydra/Lightning names ``source`` imports (a module path or name starting with ``_``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("hydra", "lightning"):
            parts = node.module.split(".")
            names = [alias.name for alias in node.names]
            if any(part.startswith("_") for part in parts) or any(n.startswith("_") for n in names):
                found.append(f"from {node.module} import {', '.join(names)}")
        elif isinstance(node, ast.Import):
            found += [
                alias.name
                for alias in node.names
                if alias.name.split(".")[0] in ("hydra", "lightning")
                and any(part.startswith("_") for part in alias.name.split("."))
            ]
    return found


def _pinned(package: str) -> str:
    lines = (REPO / "requirements" / "constraints.txt").read_text().splitlines()
    return next(line.split("==")[1] for line in lines if line.startswith(f"{package}=="))


@pytest.mark.parametrize("package", ["hydra-core", "lightning"])
def test_the_installed_versions_are_the_pinned_ones(package: str) -> None:
    """compat.py was checked against these; a new pin means re-reading it (and this test)."""
    assert version(package) == _pinned(package)


def test_the_private_names_still_exist() -> None:
    assert callable(BasicSweeper._parse_config)  # compat.sweeper_params_overrides
    assert hydra_args_parser().parse_args(["-m", "a=1"]).multirun  # compat.hydra_args_parser
    assert callable(RichProgressBar._get_train_description)  # overridden by StepsRichProgressBar
    assert CSVLogger("/tmp/unused")._experiment is None  # read by AppendingCSVLogger.experiment


def test_no_other_module_imports_a_private_hydra_or_lightning_name() -> None:
    found = [
        f"{path.relative_to(REPO)}: {name}"
        for path in sorted((REPO / "src").rglob("*.py"))
        if path.name != "compat.py"
        for name in private_imports(path.read_text())
    ]
    assert found == []
    assert private_imports((REPO / "src" / "ablate" / "compat.py").read_text())  # compat.py holds them


def test_the_private_import_check_catches_what_it_should() -> None:
    assert private_imports("from hydra._internal.core_plugins.basic_sweeper import BasicSweeper")
    assert private_imports("from lightning.fabric.utilities.logger import _flatten_dict")
    assert private_imports("import hydra._internal.utils")
    assert not private_imports("from lightning.pytorch.callbacks import Callback")
    assert not private_imports("from ablate._x import _y")


@dataclass
class _Point:
    x: int
    y: int


def test_flatten_params_matches_lightnings_flattening() -> None:
    params = {"a": {"b": 1, "c": {"d": "e"}}, 5: {"x": 2}, "dl": [{"p": 1}, {"q": 2}], "l": [1, 2], "pt": _Point(1, 2)}
    assert flatten_params(params) == _flatten_dict(params)
    assert flatten_params({"a": {"b": 1}}) == {"a/b": 1}


@pytest.mark.parametrize(
    ("path", "local"),
    [("/tmp/x.ckpt", True), ("relative/last.ckpt", True), ("file:///tmp/x", True), ("s3://b/x.ckpt", False)],
)
def test_is_local_path(path: str, local: bool) -> None:
    assert is_local_path(path) is local
