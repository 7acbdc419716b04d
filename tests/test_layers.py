"""Imports go down the layers (issue 19): a forker can read ``nn/`` without the training code, the
registries of tasks and metrics without torch, and the analysis without Lightning's loop.

Read from the source with ``ast`` (module-level imports: an import inside a function is a
deliberate, documented deferral and is not a layering edge at import time).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
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
    ("ablate.run.status", (), ("torch", "lightning")),
    ("ablate.eval_units", (), ("torch", "lightning", "pandas")),  # per-unit test losses: read by the analysis
    ("ablate.seeds", (), ("torch", "lightning")),
    # the config layer reads and checks configs: it knows the options and the model, not the run
    ("ablate.config", ("ablate.config", "ablate.nn", "ablate.optim", "ablate.errors"), ("lightning",)),
    # tracking labels and logs a run; it never reaches into the run's machinery or the data
    (
        "ablate.tracking",
        ("ablate.tracking", "ablate.config", "ablate.nn", "ablate.tasks", "ablate.metrics", "ablate.compat"),
        (),
    ),
    ("ablate.tasks", ("ablate.metrics", "ablate.config.options"), ("torch", "lightning")),  # the registry itself
    # the analysis reads sweeps (and, for attention maps, models), never the training loop
    (
        "ablate.analysis",
        (
            "ablate.analysis",
            "ablate.metrics",
            "ablate.tasks",
            "ablate.config.dotted",
            "ablate.nn.flops",
            "ablate.nn",
            "ablate.eval_units",
        ),
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


@pytest.mark.parametrize("layer", ["config", "nn", "tasks", "data", "tracking", "analysis", "callbacks"])
def test_nothing_below_the_run_imports_it(layer: str) -> None:
    """``ablate.run`` (the job: train, resume, checkpoints, status) sits on top; a layer below that
    imports it at import time would pull the training loop into, e.g., the analysis."""
    wrong = {
        module_name(path): sorted(
            i for i in top_level_imports(path) if i == "ablate.run" or i.startswith("ablate.run.")
        )
        for path in modules(f"ablate.{layer}")
    }
    assert not {k: v for k, v in wrong.items() if v}


# ------------------------------------------------------------------ the config stops travelling


def load_config_walk():
    spec = importlib.util.spec_from_file_location("config_walk", SRC.parents[1] / "scripts" / "config_walk.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["config_walk"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_the_run_config_is_handed_out_at_most_8_times() -> None:
    """Issue 19: ``train.run``'s config is turned into typed objects (RunControl, Preflight,
    ModelSpec) at the boundary; the entry file hands the raw config to at most 8 call sites."""
    walk = load_config_walk().config_walk()
    assert walk.returns <= 8, "\n".join(walk.lines)


def test_the_config_walk_follows_the_config_and_not_its_parts(tmp_path: Path) -> None:
    """The measuring tool itself: the whole config passed on (by position, keyword, to a class)
    is followed; a part (``cfg.optim``) is not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "other.py").write_text(
        "def check(c):\n    deeper(c)\n\ndef deeper(x):\n    pass\n\ndef optimiser(o):\n    pass\n\n"
        "class Control:\n    @classmethod\n    def from_config(cls, cfg):\n        pass\n"
    )
    (pkg / "entry.py").write_text(
        "from pkg.other import check, optimiser, Control\nfrom pkg import other\n\n"
        "def run(cfg):\n    check(cfg)\n    other.check(conf=cfg)\n    optimiser(cfg.optim)\n"
        "    Control.from_config(cfg)\n    local(cfg)\n\ndef local(cfg):\n    check(cfg)\n"
    )
    walk = load_config_walk().config_walk(tmp_path, ("pkg.entry", "run", "cfg"))
    assert walk.returns == 4  # check twice, other.check, Control.from_config; not optimiser
    assert {p.name for p in walk.files} == {"entry.py", "other.py"}
    assert any("pkg.other.deeper(x)" in line for line in walk.lines)
