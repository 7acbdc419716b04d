"""Imports go down the layers: a forker can read ``nn/`` without the training code, the registries of
tasks and metrics without torch, and the analysis without Lightning's loop.

Read from the source with ``ast``. Every import counts: absolute or relative (``from ..run import
job``), at module level, inside a function (a deferred import, e.g. to keep start-up fast, must
still go down the layers), under ``if TYPE_CHECKING:`` (a type names a dependency all the same),
and an import string (``"ablate.tasks.lm:LanguageModelTask"``, resolved when used). The layers are
the folders, from the bottom (docs/architecture.md); a module imports its own folder and the
folders below it, never one above or beside it, and no chain of imports comes back to where it
started.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.config_walk import config_walk

SRC = Path(__file__).resolve().parents[1] / "src"

# The layers, bottom first: a module may import its own folder and those of the layers below, not
# another folder of its own layer.
LAYERS: list[tuple[str, ...]] = [
    ("ablate.errors", "ablate.compat"),  # user errors; private library API
    # what a run measures; the models; the optimisers; the seed streams; per-unit test losses; writing into
    # a run's folder (no link out of it, a full disk named)
    ("ablate.metrics", "ablate.nn", "ablate.optim", "ablate.seeds", "ablate.eval_units", "ablate.writes"),
    ("ablate.config", "ablate.checkpoints"),  # the config read and checked; checkpoint files read safely
    ("ablate.data",),
    ("ablate.tasks",),
    ("ablate.callbacks", "ablate.tracking", "ablate.cli"),  # what a run measures and shows; loggers; console
    # beside each other: the analysis reads what jobs leave (status.json, metrics.csv), never the training
    # code; a job (plan, assembly, training, record) imports no analysis
    ("ablate.analysis", "ablate.run"),
    ("ablate.sweepers", "ablate.export"),  # sweeps of jobs; exports
    ("hydra_plugins",),
]
# The run record: what a job leaves in its folder (status.json: its schema and reader; csv/metrics.csv: the
# job's own reader). The analysis beside the job reads it; these modules stand on the layers below only.
RUN_RECORD = ("ablate.run.status",)
# Module-level imports that would make a light module heavy (the registries are read without torch).
LIGHT: dict[str, tuple[str, ...]] = {
    "ablate.metrics": ("torch", "lightning"),
    "ablate.seeds": ("torch", "lightning"),
    "ablate.eval_units": ("torch", "lightning", "pandas"),  # read by the analysis without the training stack
    "ablate.run.status": ("torch", "lightning", "pandas"),  # a job reads its own log back without pandas
    "ablate.run.plan": ("torch", "lightning"),  # a command line's check and a sweep's check of every job use it
    "ablate.tasks": ("torch", "lightning"),  # the registry itself: analysis and console read it without torch
    "ablate.config": ("lightning",),
}
# A string constant that is all an import path: "ablate.tasks.lm", "ablate.tasks.lm:build_lm",
# "ablate.data.lm_data.TinyShakespeare" (a docstring or a message never matches the whole pattern).
IMPORT_STRING = re.compile(r"(?:ablate|hydra_plugins)(?:\.\w+)+(?::[\w.]+)?")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported module (of the package, or a third-party top-level name)
    kind: str  # "module" (at import time), "function" (deferred), "typing" (if TYPE_CHECKING) or "string"
    line: int


def modules_under(src: Path) -> dict[str, Path]:
    """Every module of the source tree ``src`` by its dotted name."""
    modules = {}
    for path in sorted(src.rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


MODULES = modules_under(SRC)


def _targets(node: ast.Import | ast.ImportFrom, module: str, modules: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the importing module's package, one folder up per extra dot
        package = module if modules[module].name == "__init__.py" else module.rpartition(".")[0]
        parent = ".".join(package.split(".")[: len(package.split(".")) - (node.level - 1)])
        base = f"{parent}.{base}" if base else parent
    # ``from ablate.run import plan`` imports the module ablate.run.plan
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def _string_target(text: str, modules: dict[str, Path]) -> str | None:
    """The module an import string names: its longest dotted prefix that is a module (else its module
    part as written, so that a string naming a module that does not exist still shows its package)."""
    if not IMPORT_STRING.fullmatch(text):
        return None
    path = text.partition(":")[0]
    parts = path.split(".")
    known = (".".join(parts[:n]) for n in range(len(parts), 0, -1))
    return next((m for m in known if m in modules), path)


def imports_of(module: str, modules: dict[str, Path] = MODULES) -> list[Import]:
    """Every import statement and import string of ``module`` with where it stands."""
    found: list[Import] = []

    def visit(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend(Import(module, t, kind, child.lineno) for t in _targets(child, module, modules))
            elif isinstance(child, ast.Constant) and isinstance(child.value, str):
                target = _string_target(child.value, modules)
                if target is not None:
                    found.append(Import(module, target, "string", child.lineno))
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), "typing")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, "function")
            else:
                visit(child, kind)

    visit(ast.parse(modules[module].read_text()), "module")
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


def not_down(imports: list[Import]) -> list[str]:
    """The imports among ``imports`` that do not go down the layers, as ``module:line (kind) -> target``."""
    wrong = []
    for imp in imports:
        if "ablate" in (imp.module, imp.target) or not imp.target.startswith(("ablate.", "hydra_plugins")):
            continue  # the package root (it registers the config resolvers); third-party packages
        if package_of(imp.target) == package_of(imp.module):
            continue
        own, other = layer_of(imp.module), layer_of(imp.target)
        if imp.target in RUN_RECORD and own is not None and other is not None and other <= own:
            continue  # the run record, read from beside (the analysis)
        if own is None or other is None or other >= own:
            wrong.append(f"{imp.module}:{imp.line} ({imp.kind}) -> {imp.target}")
    return wrong


def test_imports_go_down_the_layers() -> None:
    """Relative, deferred (function-level), typing imports and import strings included: each may only go down."""
    wrong = not_down(ALL_IMPORTS)
    assert not wrong, "imports that do not go down the layers:\n" + "\n".join(wrong)


def test_training_imports_no_analysis() -> None:
    """A job, its task, model and data stand without the analysis package: they meet it only at the
    files a job leaves (``status.json``, ``csv/metrics.csv``)."""
    training = ("ablate.run", "ablate.tasks", "ablate.nn", "ablate.data")
    found = [
        f"{i.module}:{i.line} ({i.kind}) -> {i.target}"
        for i in ALL_IMPORTS
        if package_of(i.module) in training and package_of(i.target) == "ablate.analysis"
    ]
    assert not found


def test_the_package_never_imports_the_lab() -> None:
    """The measurements and the verdict simulations sit beside the package (``benchmarks/``, the
    experiments' code under ``experiments/``), not installed (issue 51 item 1): they import the
    package, never the reverse, and no module of them is left inside it."""
    lab = ("benchmarks", "experiments")
    found = [f"{i.module}:{i.line} ({i.kind}) -> {i.target}" for i in ALL_IMPORTS if i.target.split(".")[0] in lab]
    assert not found
    inside = [m for m in MODULES if m.split(".")[1:2] == ["benchmark"] or m.endswith((".calibration", ".simulate"))]
    assert not inside, inside


def test_the_run_record_stands_on_the_layers_below() -> None:
    """What the analysis may read of ``run/`` imports nothing else of it, nor anything beside or above."""
    found = [
        f"{i.module}:{i.line} -> {i.target}"
        for i in ALL_IMPORTS
        if i.module in RUN_RECORD
        and i.target.startswith("ablate.")
        and i.target not in RUN_RECORD
        and (layer_of(i.target) or 0) >= (layer_of(i.module) or 0)
    ]
    assert not found


def test_the_layers_test_sees_relative_imports_and_import_strings(tmp_path: Path) -> None:
    """The reader itself, on a module tree of its own: ``from ..run import job`` written upward in
    ``nn/``, and an import string naming the analysis in ``tasks/``, are both imports that go up."""
    package = tmp_path / "ablate"
    for folder, source in {
        "run": "",
        "analysis": "",
        "nn": "from ..run import job\nfrom . import block\nfrom .block import Block\n",
        "tasks": 'MAPS = {"lm": "ablate.analysis.x:lm_maps"}\nHELP = "see ablate.analysis.x for the maps"\n',
    }.items():
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text(source)
    (package / "__init__.py").write_text("")
    (package / "run" / "job.py").write_text("")
    (package / "nn" / "block.py").write_text("from .. import errors\n")
    modules = modules_under(tmp_path)
    found = [imp for module in modules for imp in imports_of(module, modules)]
    assert {(i.module, i.target, i.kind) for i in found} == {
        ("ablate.nn", "ablate.run.job", "module"),
        ("ablate.nn", "ablate.nn.block", "module"),
        ("ablate.nn.block", "ablate", "module"),
        ("ablate.tasks", "ablate.analysis", "string"),  # ablate.analysis.x does not exist: its package
    }
    assert sorted(not_down(found)) == [
        "ablate.nn:1 (module) -> ablate.run.job",
        "ablate.tasks:1 (string) -> ablate.analysis",
    ]


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
    hidden in a function is still a circle: the two modules cannot be read apart). Import strings
    are left out: a registry names the modules it resolves when asked (``tasks/__init__.py``), and
    they import the registry back."""
    edges: dict[str, set[str]] = {}
    for imp in ALL_IMPORTS:
        if imp.kind == "string":
            continue
        if imp.target in MODULES and imp.target != imp.module and imp.target != "ablate":
            edges.setdefault(imp.module, set()).add(imp.target)
    assert not cycles(edges)


def test_the_layers_test_sees_deferred_and_typing_imports(tmp_path: Path) -> None:
    """The reader itself: an import inside a function or under TYPE_CHECKING is an import."""
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\ndef f():\n    import b\nimport c\n"
    (tmp_path / "probe.py").write_text(source)
    kinds = {(i.target, i.kind) for i in imports_of("probe", {"probe": tmp_path / "probe.py"})}
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
    # errors: the user-error classes
    assert all(t.startswith(("ablate.nn", "ablate.errors")) for t in nn), nn
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


# ------------------------------------------------------------------ the tests' own imports

TESTS = SRC.parent / "tests"
# what a test could import of the tests folder by name: its modules and folders, and "tests" itself
TEST_NAMES = {p.stem for p in TESTS.rglob("*.py")} | {p.name for p in TESTS.iterdir() if p.is_dir()} | {"tests"}
HYDRA_TARGET = re.compile(r"_target_=([\w.]+)")


def imports_of_other_tests(source: str, test_names: set[str] = TEST_NAMES) -> list[str]:
    """What a test file imports of the tests folder other than ``helpers``: a test module, conftest, a
    relative import, or a class a run is handed by name (``+callbacks.x._target_=module.Class``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = ["." * node.level + (node.module or "")]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = HYDRA_TARGET.findall(node.value)
        for name in names:
            top = name.split(".")[0]
            if name.startswith(".") or (top in test_names and top != "helpers"):
                found.append(f"{node.lineno}: {name}")
    return found


def test_no_test_module_imports_another() -> None:
    """What the tests share is in ``tests/helpers/``: a test module imports no other test module nor
    ``conftest`` (whose fixtures pytest hands over by name)."""
    found = [
        f"{path.relative_to(TESTS)}:{where}"
        for path in sorted(TESTS.rglob("*.py"))
        if "helpers" not in path.relative_to(TESTS).parts
        for where in imports_of_other_tests(path.read_text())
    ]
    assert not found, "move what is shared into tests/helpers/:\n" + "\n".join(found)


def test_the_test_import_reader_finds_what_it_looks_for() -> None:
    source = (
        "import forked_python\nfrom conftest import TINY\nfrom ._models import tiny_lm\nfrom test_stats import write_job\n"
        "from helpers.runs import TINY\nimport torch\nfrom torch import nn\n"
        "ARGS = ['+callbacks.kill._target_=_kill_at_step.KillAtStep', '+callbacks.k._target_=helpers.kill_at_step.KillAtStep']\n"
    )
    names = {"forked_python", "conftest", "_models", "test_stats", "_kill_at_step", "helpers"}
    assert imports_of_other_tests(source, names) == [
        "1: forked_python",
        "2: conftest",
        "3: ._models",
        "4: test_stats",
        "8: _kill_at_step.KillAtStep",
    ]
