"""Every ``from ablate... import name`` in the entry points (train.py, eval.py, ...), the scripts and
the package names something that exists: a module split must update its importers, and a script
that is not type-checked would otherwise fail only when a user runs it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from conftest import REPO

FILES = sorted([*REPO.glob("*.py"), *(REPO / "scripts").glob("*.py"), *(REPO / "src" / "ablate").rglob("*.py")])


def ablate_imports(path: Path) -> list[tuple[str, str]]:
    """``(module, name)`` of every absolute ``from ablate... import name`` in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "ablate":
            found += [(node.module or "", alias.name) for alias in node.names]
    return found


def exists(module: str, name: str) -> bool:
    if hasattr(importlib.import_module(module), name):
        return True
    try:  # a submodule: `from ablate.data import cache`
        importlib.import_module(f"{module}.{name}")
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_ablate_import_names_something_that_exists(path: Path):
    missing = [f"{m}.{n}" for m, n in ablate_imports(path) if not exists(m, n)]
    assert not missing, f"{path.relative_to(REPO)} imports names that do not exist: {missing}"


def test_a_stale_import_is_found(tmp_path: Path):
    stale = tmp_path / "stale.py"
    stale.write_text("from ablate.data.translation_data import read_lines\nfrom ablate.data import cache\n")
    assert [exists(m, n) for m, n in ablate_imports(stale)] == [False, True]
