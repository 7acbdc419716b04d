"""Scripts are thin entry points: the logic is in the package (type-checked, importable, tested
there), a script parses its command line and calls it, and no script edits ``sys.path``, but to
reach the measurements beside the package (``benchmarks/``, not installed by design: the lab is not
the product), and then only by putting the checkout's root first."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from helpers.runs import REPO

SCRIPTS = sorted((REPO / "scripts").glob("*.py"))
MAX_LINES = 80


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_script_is_a_thin_entry_point(script: Path) -> None:
    lines = len(script.read_text().splitlines())
    assert lines <= MAX_LINES, f"{script.name} has {lines} lines: move its logic into src/ablate"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_no_script_edits_the_import_path(script: Path) -> None:
    calls = [
        ast.unparse(node)
        for node in ast.walk(ast.parse(script.read_text()))
        if isinstance(node, ast.Call) and ast.unparse(node.func).startswith("sys.path.")
    ]
    source = script.read_text()
    if "from benchmarks." in source:  # the lab beside src/: its root on the path, and nothing else
        calls = [c for c in calls if c != LAB_ROOT]
    assert not calls, f"{script.name}: {calls} (the package is installed: import it)"


LAB_ROOT = "sys.path.insert(0, str(Path(__file__).resolve().parents[1]))"
