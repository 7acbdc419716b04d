"""Imports go down the layers: a forker can read ``nn/`` without the training code, the registries of
tasks and metrics without torch, and the analysis without Lightning's loop.

Read from the source with ``ast``. Every import counts: at module level, inside a function (a
deferred import, e.g. to keep start-up fast, must still go down the layers) and under
``if TYPE_CHECKING:`` (a type names a dependency all the same). The layers are the folders, from
the bottom (docs/architecture.md); a module imports its own folder and the folders below it,
never one above, and no chain of imports comes back to where it started.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from ablate.benchmark.config_walk import config_walk

SRC = Path(__file__).resolve().parents[1] / "src"

# The layers, bottom first: a module may import its own folder and those of the layers below.
LAYERS: list[tuple[str, ...]] = [
    ("ablate.errors", "ablate.compat"),
    # what a run measures; the models; the optimisers; the seed streams; per-unit test losses
    ("ablate.metrics", "ablate.nn", "ablate.optim", "ablate.seeds", "ablate.eval_units"),
    ("ablate.config", "ablate.checkpoints"),  # the config read and checked; checkpoint files read safely
    ("ablate.data",),
    ("ablate.tasks",),
    ("ablate.callbacks", "ablate.tracking", "ablate.cli"),  # what a run measures and shows; loggers; console
    ("ablate.analysis",),  # reads sweeps, never the training loop
    ("ablate.run",),  # one job: checks, lifecycle, assembly, training
    ("ablate.sweepers", "ablate.benchmark", "ablate.export"),  # sweeps of jobs; measurements; exports
    ("hydra_plugins",),
]
# Module-level imports that would make a light module heavy (the registries are read without torch).
LIGHT: dict[str, tuple[str, ...]] = {
    "ablate.metrics": ("torch", "lightning"),
    "ablate.seeds": ("torch", "lightning"),
    "ablate.eval_units": ("torch", "lightning", "pandas"),  # read by the analysis without the training stack
    "ablate.run.status": ("torch", "lightning"),
    "ablate.tasks": ("torch", "lightning"),  # the registry itself: analysis and console read it without torch
    "ablate.config": ("lightning",),
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported module (of the package, or a third-party top-level name)
    kind: str  # "module" (at import time), "function" (deferred) or "typing" (if TYPE_CHECKING)
    line: int


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _targets(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level or not node.module:
        return []
    # ``from ablate.run import lifecycle`` imports the module ablate.run.lifecycle
    return [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names]


def imports_of(module: str) -> list[Import]:
    """Every import statement of ``module`` with where it stands."""
    found: list[Import] = []

    def visit(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend(Import(module, t, kind, child.lineno) for t in _targets(child))
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), "typing")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, "function")
            else:
                visit(child, kind)

    visit(ast.parse(MODULES[module].read_text()), "module")
    return found


ALL_IMPORTS = [imp for module in MODULES for imp in imports_of(module)]


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2]) if module.startswith("ablate.") else module.split(".")[0]


def layer_of(module: str) -> int | None:
    package = package_of(module)
    return next((i for i, layer in enumerate(LAYERS) if package in layer), None)


def test_every_package_has_a_layer() -> None:
    unplaced = {package_of(m) for m in MODULES if m != "ablate" and layer_of(m) is None}
    assert not unplaced, f"add these to LAYERS in tests/test_layers.py (and docs/architecture.md): {unplaced}"


def test_imports_go_down_the_layers() -> None:
    """Deferred (function-level) and typing imports included: each may only go down."""
    wrong = []
    for imp in ALL_IMPORTS:
        if "ablate" in (imp.module, imp.target) or not imp.target.startswith(("ablate.", "hydra_plugins")):
            continue  # the package root (it registers the config resolvers); third-party packages
        if package_of(imp.target) == package_of(imp.module):
            continue
        own, other = layer_of(imp.module), layer_of(imp.target)
        if own is None or other is None or other >= own:
            wrong.append(f"{imp.module}:{imp.line} ({imp.kind}) -> {imp.target}")
    assert not wrong, "imports that do not go down the layers:\n" + "\n".join(wrong)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), i.e. the import circles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return found


def test_no_import_circle() -> None:
    """No module reaches itself through imports, deferred and typing imports included (a circle
    hidden in a function is still a circle: the two modules cannot be read apart)."""
    edges: dict[str, set[str]] = {}
    for imp in ALL_IMPORTS:
        if imp.target in MODULES and imp.target != imp.module and imp.target != "ablate":
            edges.setdefault(imp.module, set()).add(imp.target)
    assert not cycles(edges)


def test_the_layers_test_sees_deferred_and_typing_imports(tmp_path: Path) -> None:
    """The reader itself: an import inside a function or under TYPE_CHECKING is an import."""
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\ndef f():\n    import b\nimport c\n"
    MODULES["ablate._layers_probe"] = tmp_path / "probe.py"
    MODULES["ablate._layers_probe"].write_text(source)
    try:
        kinds = {(i.target, i.kind) for i in imports_of("ablate._layers_probe")}
    finally:
        del MODULES["ablate._layers_probe"]
    assert kinds == {("typing", "module"), ("a", "typing"), ("b", "function"), ("c", "module")}
    assert cycles({"x": {"y"}, "y": {"x"}, "z": {"x"}}) == [["x", "y"]]


@pytest.mark.parametrize("module", sorted(LIGHT))
def test_light_modules_stay_light(module: str) -> None:
    """Modules that are read without torch import no heavy library when they are imported."""
    heavy = [
        f"{imp.module}:{imp.line} -> {imp.target}"
        for imp in ALL_IMPORTS
        if (imp.module == module or (module != "ablate.tasks" and imp.module.startswith(module + ".")))
        and imp.kind == "module"
        and imp.target.split(".")[0] in LIGHT[module]
    ]
    assert not heavy


def test_the_task_registry_imports_only_the_metrics_and_option_errors_at_import_time() -> None:
    """``tasks/__init__.py`` is what the console and the analysis read: at import time it needs the
    metric registry and the config error only; a task's classes are imported when used."""
    found = {i.target for i in imports_of("ablate.tasks") if i.kind == "module" and i.target.startswith("ablate")}
    assert found <= {"ablate.metrics", "ablate.errors"}


def test_nn_and_the_config_package_stand_alone() -> None:
    nn = {
        i.target for m in MODULES if m.startswith("ablate.nn") for i in imports_of(m) if i.target.startswith("ablate")
    }
    assert all(t.startswith(("ablate.nn", "ablate.errors")) for t in nn), nn  # errors: the user-error classes
    assert not [i for i in imports_of("ablate.config") if i.target.startswith("ablate")]  # config/__init__.py


# ------------------------------------------------------------------ the config stops travelling


def test_the_run_config_is_handed_out_at_most_8_times() -> None:
    """Issue 19: ``train.run``'s config is turned into typed objects (Job, Preflight, Plan,
    ModelSpec) at the boundary; the entry file hands the raw config to at most 8 call sites."""
    walk = config_walk()
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
    walk = config_walk(tmp_path, ("pkg.entry", "run", "cfg"))
    assert walk.returns == 4  # check twice, other.check, Control.from_config; not optimiser
    assert {p.name for p in walk.files} == {"entry.py", "other.py"}
    assert any("pkg.other.deeper(x)" in line for line in walk.lines)
