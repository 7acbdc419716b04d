"""No module of the package sets process-wide state when it is imported, or keeps its own state in
the environment: importing ``ablate.run.assembly`` (the benchmark does, a notebook may) must not
change which warnings every later line of the process sees, and an answer cached in ``os.environ``
leaks into every process started afterwards. Such state is set by an explicit call at an entry
point (``ablate.cli.console.quiet_known_noise``), scoped to the work it concerns
(``warnings.catch_warnings``), or cached inside the process (``functools.cache``).

Read from the source with ``ast``, as ``tests/test_layers.py`` reads the imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Calls that change the whole process: the warning filters, the logging configuration.
PROCESS_WIDE = {
    ("warnings", "filterwarnings"),
    ("warnings", "simplefilter"),
    ("logging", "basicConfig"),
    ("logging", "captureWarnings"),
}
# Environment variables the package may set, and why: a library that reads its switch only from the
# environment.
ALLOWED_ENVIRONMENT = {
    "MLFLOW_ALLOW_FILE_STORE": "MLflow 3 opens a file store only when this is set (tracking/loggers.py)",
    "ABLATE_CRASH_NOTES": "the DDP ranks Lightning starts inherit only the environment: where each notes its crash, "
    "set for the launch and restored after it (run/distributed.py:crash_notes)",
}


def _call_name(node: ast.Call) -> tuple[str, str] | None:
    func = node.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.value.id, func.attr
    return None


def _module_level_statements(tree: ast.Module) -> list[ast.stmt]:
    """What runs when the module is imported: the statements outside functions and classes
    (a class body runs too, but its methods do not), including those under ``if``/``try``."""
    found: list[ast.stmt] = []
    pending = list(tree.body)
    while pending:
        stmt = pending.pop()
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(stmt, ast.ClassDef):
            pending.extend(s for s in stmt.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)))
            continue
        if isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For, ast.While)):  # what runs is inside
            pending.extend([*stmt.body, *stmt.orelse] if not isinstance(stmt, ast.With) else stmt.body)
            if isinstance(stmt, ast.Try):
                pending.extend([*stmt.finalbody, *(s for handler in stmt.handlers for s in handler.body)])
            continue
        found.append(stmt)
    return found


def set_at_import(source: str) -> list[str]:
    """The process-wide calls a module makes when it is imported, as ``line: module.function``."""
    found = []
    for stmt in _module_level_statements(ast.parse(source)):
        for node in ast.walk(stmt):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                break  # a function defined under an ``if``: its body does not run at import
            if isinstance(node, ast.Call) and _call_name(node) in PROCESS_WIDE:
                found.append(f"{node.lineno}: {'.'.join(_call_name(node) or ())}")
    return found


def environment_writes(source: str) -> list[str]:
    """Where a module writes ``os.environ`` (``os.environ[k] = v``, ``.setdefault``, ``.update``,
    ``os.putenv``), as ``line: the key`` (``?`` when the key is not a literal)."""
    found = []

    def key(node: ast.expr | None) -> str:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else "?"

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and ast.unparse(target.value) == "os.environ":
                    found.append(f"{node.lineno}: {key(target.slice)}")
        elif isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name in ("os.environ.setdefault", "os.environ.update", "os.putenv"):
                found.append(f"{node.lineno}: {key(node.args[0] if node.args else None)}")
    return found


SOURCES = {path.relative_to(SRC): path.read_text() for path in sorted(SRC.rglob("*.py"))}


def test_no_module_sets_process_wide_state_when_imported() -> None:
    found = [f"{path}:{where}" for path, source in SOURCES.items() for where in set_at_import(source)]
    assert not found, "make these explicit calls at an entry point, or scope them (warnings.catch_warnings)"


def test_the_package_keeps_no_state_of_its_own_in_the_environment() -> None:
    found = [
        f"{path}:{where}"
        for path, source in SOURCES.items()
        for where in environment_writes(source)
        if where.split(": ", 1)[1] not in ALLOWED_ENVIRONMENT
    ]
    assert not found, "cache inside the process (functools.cache) or pass the value on explicitly"


def test_the_readers_find_what_they_look_for() -> None:
    """The two readers themselves, on a module that does each thing once, and in places that do not
    run at import (a function body, a method) or are not the environment."""
    source = (
        "import os, warnings\n"
        "warnings.filterwarnings('ignore', message='x')\n"
        "if True:\n    warnings.simplefilter('ignore')\n"
        "def f():\n    warnings.filterwarnings('ignore')\n    os.environ['CACHED'] = '1'\n"
        "class C:\n    def m(self):\n        warnings.simplefilter('error')\n"
        "os.environ.setdefault('MLFLOW_ALLOW_FILE_STORE', 'true')\n"
        "settings = {}\nsettings['KEY'] = 1\n"
    )
    assert sorted(set_at_import(source)) == ["2: warnings.filterwarnings", "4: warnings.simplefilter"]
    assert sorted(environment_writes(source)) == ["11: MLFLOW_ALLOW_FILE_STORE", "7: CACHED"]
