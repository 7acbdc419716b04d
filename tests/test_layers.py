"""Imports go down the layers (issue 19): a forker can read ``nn/`` without the training code, the
registries of tasks and metrics without torch, and the analysis without Lightning's loop.

Read from the source with ``ast`` (module-level imports: an import inside a function is a
deliberate, documented deferral and is not a layering edge at import time).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "ablate"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(path: Path) -> set[str]:
    """The modules ``path`` imports at import time (``if TYPE_CHECKING:`` blocks left out)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == "ablate":  # from ablate import metrics
            found |= {f"ablate.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def modules(prefix: str) -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if module_name(p) == prefix or module_name(p).startswith(prefix + "."))


# (modules, what they may import of the package, what they may not import at all)
RULES = [
    ("ablate.nn", ("ablate.nn",), ()),
    ("ablate.metrics", (), ("torch", "lightning")),
    ("ablate.run_status", (), ("torch", "lightning")),
    ("ablate.tasks", ("ablate.metrics", "ablate.options"), ("torch", "lightning")),  # the registry itself
    # the analysis reads sweeps (and, for attention maps, models), never the training loop
    (
        "ablate.analysis",
        ("ablate.analysis", "ablate.metrics", "ablate.tasks", "ablate.dotted", "ablate.flops", "ablate.nn"),
        (),
    ),
]


@pytest.mark.parametrize("prefix, allowed, forbidden", RULES, ids=[r[0] for r in RULES])
def test_imports_go_down(prefix: str, allowed: tuple[str, ...], forbidden: tuple[str, ...]) -> None:
    paths = [SRC / "tasks" / "__init__.py"] if prefix == "ablate.tasks" else modules(prefix)
    assert paths, prefix
    wrong = {}
    for path in paths:
        for imported in top_level_imports(path):
            up = imported.startswith("ablate") and not any(
                imported == a or imported.startswith(a + ".") for a in allowed
            )
            heavy = any(imported == f or imported.startswith(f + ".") for f in forbidden)
            if up or heavy:
                wrong.setdefault(module_name(path), []).append(imported)
    assert not wrong, f"imports against the layers: {wrong}"
