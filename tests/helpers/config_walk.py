"""Follow the run's raw config through the code: where does ``cfg`` travel?

    python tests/helpers/config_walk.py                  # the tree of calls that pass the config on, and the counts
    python tests/helpers/config_walk.py --max-returns 8  # exit 1 if the entry file hands it out more often

A measuring tool of the code, not of a run: it lives with the tests (``tests/test_layers.py`` holds
the count down) and reads ``src/`` without importing it.

A static walk (``ast``, no import): it starts at ``ablate.run.train.run(cfg)`` and follows every call
that passes the config object itself (the parameter that received it, by position or keyword) to
a function of the package, then does the same inside that function. Passing a part (``cfg.optim``)
is the point of the design, not a step of the walk; a call the walk cannot resolve statically
(a method of another object, a callable in a variable) is not followed.

Counted, as issue 19 defines them:
- *files visited*: the source files of every function the config reached;
- *returns to the entry file*: the call sites in the entry file (``train.py``) that hand the
  config to a function in another file (each such call returns there; a site the walk reaches
  twice, e.g. a function called from two places, counts once).
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"  # this file is tests/helpers/config_walk.py
ENTRY = ("ablate.run.train", "run", "cfg")


@dataclass
class Module:
    name: str
    path: Path
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)  # "f" and "Class.method"
    imports: dict[str, str] = field(default_factory=dict)  # local name -> "module" or "module:attr"


def module_name(path: Path, src: Path) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def load_modules(src: Path, package: str) -> dict[str, Module]:
    found = {}
    for path in sorted((src / package).rglob("*.py")):
        module = Module(module_name(path, src), path)
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                module.functions[node.name] = node  # type: ignore[assignment]
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        module.functions[f"{node.name}.{item.name}"] = item  # type: ignore[assignment]
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    module.imports[alias.asname or alias.name.split(".")[0]] = alias.name
        for found_import in ast.walk(tree):  # imports inside functions count too: they are calls all the same
            if isinstance(found_import, ast.ImportFrom) and found_import.module and found_import.level == 0:
                for alias in found_import.names:
                    module.imports[alias.asname or alias.name] = f"{found_import.module}:{alias.name}"
        found[module.name] = module
    return found


def resolve(modules: dict[str, Module], module: Module, call: ast.Call, cls: str | None) -> tuple[Module, str] | None:
    """The package function a call lands in: ``(module, "f" or "Class.__init__")``, or None."""

    def target(mod_name: str, attr: str) -> tuple[Module, str] | None:
        if f"{mod_name}.{attr}" in modules:  # ``from ablate import train`` then ``train.x`` below
            return None
        mod = modules.get(mod_name)
        if mod is None:
            return None
        if attr in mod.functions:
            return mod, attr
        if f"{attr}.__init__" in mod.functions:
            return mod, f"{attr}.__init__"
        if attr in mod.imports:  # re-exported from another module of the package
            return follow(mod, attr)
        return None

    def follow(mod: Module, name: str) -> tuple[Module, str] | None:
        imported = mod.imports[name]
        if ":" in imported:
            mod_name, attr = imported.split(":")
            return target(mod_name, attr)
        return None

    func = call.func
    if isinstance(func, ast.Name):
        if func.id in module.functions:
            return module, func.id
        if f"{func.id}.__init__" in module.functions:
            return module, f"{func.id}.__init__"
        if func.id in module.imports:
            return follow(module, func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = func.value.id
        if owner in ("self", "cls") and cls and f"{cls}.{func.attr}" in module.functions:
            return module, f"{cls}.{func.attr}"
        if f"{owner}.{func.attr}" in module.functions:  # a class method of this module
            return module, f"{owner}.{func.attr}"
        imported = module.imports.get(owner)
        if imported is not None and ":" in imported:  # ``from m import Class`` then ``Class.method``
            mod_name, cls_name = imported.split(":")
            mod = modules.get(mod_name)
            if mod is not None and f"{cls_name}.{func.attr}" in mod.functions:
                return mod, f"{cls_name}.{func.attr}"
        if imported is not None:
            return target(imported.replace(":", "."), func.attr)
    return None


def receiving_parameter(function: ast.FunctionDef, call: ast.Call, name: str, method: bool) -> str | None:
    """The callee's parameter that receives the variable ``name`` at this call."""
    params = [a.arg for a in function.args.posonlyargs + function.args.args]
    if method and params:
        params = params[1:]  # self / cls
    for index, arg in enumerate(call.args):
        if isinstance(arg, ast.Name) and arg.id == name and index < len(params):
            return params[index]
    for keyword in call.keywords:
        if isinstance(keyword.value, ast.Name) and keyword.value.id == name and keyword.arg:
            return keyword.arg
    return None


@dataclass
class Walk:
    lines: list[str] = field(default_factory=list)
    entry: str = ENTRY[0]
    files: set[Path] = field(default_factory=set)
    entry_sites: set[tuple[int, int]] = field(default_factory=set)  # (line, column) of each call in the entry file

    @property
    def returns(self) -> int:
        return len(self.entry_sites)


def walk(modules: dict[str, Module], mod: Module, qualname: str, param: str, walk_: Walk, depth: int, seen) -> None:
    walk_.files.add(mod.path)
    function = mod.functions[qualname]
    cls = qualname.split(".")[0] if "." in qualname else None
    for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
        landed = resolve(modules, mod, call, cls)
        if landed is None:
            continue
        callee_mod, callee = landed
        node = callee_mod.functions[callee]
        received = receiving_parameter(node, call, param, method="." in callee)
        if received is None:
            continue
        if mod.name == walk_.entry and callee_mod.path != mod.path:
            walk_.entry_sites.add((call.lineno, call.col_offset))
        label = f"{'  ' * depth}{callee_mod.name}.{callee}({received})  [{callee_mod.path.name}:{node.lineno}]"
        key = (callee_mod.name, callee, received)
        if key in seen:
            walk_.lines.append(label + "  (seen)")
            continue
        walk_.lines.append(label)
        walk(modules, callee_mod, callee, received, walk_, depth + 1, seen | {key})


def config_walk(src: Path = SRC, entry: tuple[str, str, str] = ENTRY) -> Walk:
    """Walk the config from ``entry`` = (module, function, parameter) through the package of
    ``src`` that the module belongs to."""
    module, function, param = entry
    modules = load_modules(src, module.split(".")[0])
    result = Walk(entry=module)
    result.lines.append(f"{module}.{function}({param})")
    walk(modules, modules[module], function, param, result, 1, {(module, function, param)})
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-returns", type=int, help="exit 1 if the entry file hands the config out more often")
    args = parser.parse_args(argv)
    result = config_walk()
    print("\n".join(result.lines))
    print(f"\nfiles visited: {len(result.files)}; returns to the entry file: {result.returns}")
    if args.max_returns is not None and result.returns > args.max_returns:
        print(f"more than {args.max_returns} returns", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
