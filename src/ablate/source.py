"""Python definitions read from their source with :mod:`ast`, without importing their modules.

A command line is checked before torch is imported (:mod:`ablate.cli`), yet its keys are those of
classes whose modules import torch: the architecture options (:mod:`ablate.nn.options`) and the
classes Hydra builds (``trainer``: Lightning's ``Trainer``; ``data``; each ``callbacks.*``:
:func:`ablate.config.types.signature`). Their parameters, type hints and declared class attributes
are read here from the source files instead.

A module's file is found by :func:`importlib.util.find_spec` on the top-level package only (which
does not run it) and the dotted path walked from there; a name is followed through the module's
top-level definitions, its imports (relative, ``as``, ``*``) and its module-level assignments (a
type alias such as Lightning's ``_PRECISION_INPUT``). An annotation is evaluated as Python's typing
would: names of :mod:`typing` and of the standard library are the real objects (imported: they are
light), a class defined in a package's source is a stand-in class of the same name (no config value
is an instance of one, as none is of the real class), and an annotation naming anything else
(a name imported only under ``TYPE_CHECKING``, a computed value) is ``Any``: not checked, as
:func:`ablate.config.types.signature` does with a hint it cannot resolve. Signatures follow a class's
bases in Python's method resolution order (C3). ``tests/config/test_source_signatures.py`` holds
this reading against :mod:`inspect` of the imported targets, every one the config files name.

Own code: the standard library's :mod:`inspect` needs the imported object, and no library reads
signatures from source with the annotations evaluated.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class Unresolved(Exception):
    """A name or expression the source reader cannot evaluate (its annotation is then ``Any``)."""


@dataclass(frozen=True)
class Module:
    """A module's top-level definitions (not executed): ``name -> node`` for classes, functions and
    assigned values, ``name -> (module, attribute or None)`` for imports, and ``*``-imported modules."""

    name: str
    package: str
    defined: dict[str, ast.AST]
    imported: dict[str, tuple[str, str | None]]
    star: list[str]


@dataclass(frozen=True)
class ClassRef:
    module: str
    node: ast.ClassDef


@dataclass(frozen=True)
class FunctionRef:
    module: str
    node: ast.FunctionDef | ast.AsyncFunctionDef


def module_file(name: str) -> Path | None:
    """The source file of the module ``name``, found without executing it or its packages."""
    top, *rest = name.split(".")
    spec = importlib.util.find_spec(top) if top not in sys.modules else getattr(sys.modules[top], "__spec__", None)
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    folders = [Path(p) for p in spec.submodule_search_locations or ()]  # a namespace package: several
    for i, part in enumerate(rest):
        last = i == len(rest) - 1
        found = [f / part for f in folders if (f / part).is_dir()]
        if last:
            files = [p for f in folders for p in (f / part / "__init__.py", f / f"{part}.py") if p.is_file()]
            return files[0] if files else None
        folders = found
    return None


def _collect(module: str, package: str, body: list[ast.stmt], found: Module) -> None:
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            found.defined[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found.defined[node.target.id] = node.value
        elif isinstance(node, ast.Assign):
            found.defined.update({t.id: node.value for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    found.imported[alias.asname] = (alias.name, None)
                else:
                    top = alias.name.split(".")[0]
                    found.imported[top] = (top, None)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, package)
            for alias in node.names:
                if alias.name == "*":
                    found.star.append(source)
                else:
                    found.imported[alias.asname or alias.name] = (source, alias.name)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            _collect(module, package, node.body, found)  # a version switch: the branches' names
            _collect(module, package, node.orelse, found)
        elif isinstance(node, ast.Try):
            _collect(module, package, node.body, found)


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - (node.level - 1)])
    return f"{base}.{node.module}" if node.module else base


@functools.cache
def definitions(module: str) -> Module:
    """The top-level definitions of ``module`` (:class:`Module`), read from its source."""
    path = module_file(module)
    if path is None:
        raise Unresolved(f"no source file for {module}")
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = Module(module, package, {}, {}, [])
    _collect(module, package, ast.parse(path.read_text(encoding="utf-8")).body, found)
    return found


def _is_module(name: str) -> bool:
    try:
        return module_file(name) is not None
    except (ImportError, ValueError):
        return False


def _light(module: str) -> bool:
    """A module imported for real to read a name: the standard library's and typing_extensions."""
    return module.split(".")[0] in sys.stdlib_module_names or module == "typing_extensions"


@dataclass(frozen=True)
class ModuleRef:
    name: str


def lookup(module: str, name: str, seen: frozenset[tuple[str, str]] = frozenset()) -> Any:
    """What ``name`` is in ``module``: a real object (standard library), a :class:`ModuleRef`, a
    :class:`ClassRef`, a :class:`FunctionRef`, or the value of an assignment, evaluated."""
    if (module, name) in seen:
        raise Unresolved(f"{module}.{name}: circular")
    seen = seen | {(module, name)}
    if _light(module):
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as err:
            raise Unresolved(f"{module}.{name}") from err
    found = definitions(module)
    node = found.defined.get(name)
    if isinstance(node, ast.ClassDef):
        return ClassRef(module, node)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return FunctionRef(module, node)
    if node is not None:
        return evaluate(node, module, seen)
    if name in found.imported:
        source, attribute = found.imported[name]
        if attribute is None:
            return _module_ref(source)
        if _is_module(f"{source}.{attribute}") and not _light(source):
            return ModuleRef(f"{source}.{attribute}")
        return lookup(source, attribute, seen)
    for source in found.star:
        try:
            return lookup(source, name, seen)
        except Unresolved:
            continue
    if _is_module(f"{module}.{name}"):
        return ModuleRef(f"{module}.{name}")
    raise Unresolved(f"{module}.{name}")


def _module_ref(name: str) -> Any:
    return importlib.import_module(name) if _light(name) else ModuleRef(name)


def _attribute(value: Any, name: str, seen: frozenset[tuple[str, str]]) -> Any:
    if isinstance(value, ModuleRef):
        return lookup(value.name, name, seen)
    if isinstance(value, (ClassRef, FunctionRef)):
        raise Unresolved(name)
    try:
        return getattr(value, name)
    except AttributeError as err:
        raise Unresolved(name) from err


@functools.cache
def stand_in(module: str, qualname: str) -> type:
    """The class standing for ``module.qualname`` in a hint (one per class, so that unions dedupe)."""
    return type(qualname.rpartition(".")[2], (), {"__module__": module, "__qualname__": qualname})


def _as_type(value: Any) -> Any:
    if isinstance(value, ClassRef):
        return stand_in(value.module, value.node.name)
    if isinstance(value, (FunctionRef, ModuleRef)):
        raise Unresolved(repr(value))
    return value


_OPERATORS: dict[type, Any] = {ast.BitOr: lambda a, b: a | b}


def evaluate(node: ast.AST, module: str, seen: frozenset[tuple[str, str]] = frozenset()) -> Any:
    """The value of an expression of ``module``'s source, as far as a type hint needs it."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        try:
            return lookup(module, node.id, seen)
        except Unresolved:
            if hasattr(builtins, node.id):
                return getattr(builtins, node.id)
            raise
    if isinstance(node, ast.Attribute):
        return _attribute(evaluate(node.value, module, seen), node.attr, seen)
    if isinstance(node, ast.Subscript):
        value = _as_type(evaluate(node.value, module, seen))
        index = node.slice
        if isinstance(index, ast.Tuple):
            arguments: Any = tuple(_as_type(evaluate(e, module, seen)) for e in index.elts)
        else:
            arguments = _as_type(evaluate(index, module, seen))
        try:
            return value[arguments]
        except Exception as err:
            raise Unresolved(ast.unparse(node)) from err
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = (_as_type(evaluate(n, module, seen)) for n in (node.left, node.right))
        try:
            return _OPERATORS[type(node.op)](left, right)
        except Exception as err:
            raise Unresolved(ast.unparse(node)) from err
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_as_type(evaluate(e, module, seen)) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    raise Unresolved(ast.unparse(node))


def hint(annotation: ast.expr | None, module: str) -> Any:
    """A parameter's annotation as a type, ``Any`` where it cannot be evaluated from the source."""
    if annotation is None:
        return Any
    try:
        value = evaluate(annotation, module)
        if isinstance(value, str):  # a quoted annotation: the expression it holds
            value = evaluate(ast.parse(value, mode="eval").body, module)
        return _as_type(value)
    except (Unresolved, SyntaxError, RecursionError):
        return Any


def resolve(target: str) -> ClassRef | FunctionRef:
    """The class or function ``package.module.Name`` (or ``...Class.Inner``), from the source."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:cut])
        if not _is_module(module):
            continue
        found: Any = lookup(module, parts[cut])
        for name in parts[cut + 1 :]:
            if not isinstance(found, (ClassRef, ModuleRef)):
                raise Unresolved(target)
            found = lookup(found.name, name) if isinstance(found, ModuleRef) else _member(found, name)
        if isinstance(found, (ClassRef, FunctionRef)):
            return found
        raise Unresolved(target)
    raise Unresolved(target)


def _member(cls: ClassRef, name: str) -> Any:
    for node in cls.node.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return ClassRef(cls.module, node)
    raise Unresolved(name)


def _bases(cls: ClassRef) -> list[ClassRef | None]:
    """The class's bases as read (None: one the source does not show, e.g. ``Generic[T]``, ``object``)."""
    bases: list[ClassRef | None] = []
    for base in cls.node.bases:
        if isinstance(base, ast.Subscript):  # Generic[T], Protocol[T]: no constructor of theirs
            continue
        try:
            found = evaluate(base, cls.module)
        except Unresolved:
            found = None
        if isinstance(found, ClassRef):
            bases.append(found)
        elif not (isinstance(found, type) and all("__init__" not in vars(c) for c in found.__mro__[:-1])):
            bases.append(None)  # a real class with a constructor of its own (object, ABC, Protocol: none)
    return bases


def mro(cls: ClassRef) -> list[ClassRef | None]:
    """The class's method resolution order (C3), ``None`` marking a base the source does not show."""

    def linear(c: ClassRef) -> list[Any]:
        bases = _bases(c)
        lists = [linear(b) if b is not None else [None] for b in bases] + [list(bases)]
        order: list[Any] = [c]
        while any(lists):
            lists = [seq for seq in lists if seq]
            for seq in lists:
                head = seq[0]
                if not any(head in other[1:] for other in lists):
                    break
            else:
                raise Unresolved(f"no method resolution order for {c.node.name}")
            order.append(head)
            lists = [seq[1:] if seq[0] == head else seq for seq in lists]
        return order

    return linear(cls)


def _own_function(cls: ClassRef, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    own = [n for n in cls.node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    return own[-1] if own else None


def parameters(function: ast.FunctionDef | ast.AsyncFunctionDef, module: str) -> tuple[dict[str, Any], bool]:
    """``(keyword -> hint, takes **kwargs)`` of a function (``self`` and positional-only left out)."""
    args = function.args
    found = {a.arg: hint(a.annotation, module) for a in (*args.args, *args.kwonlyargs) if a.arg != "self"}
    return found, args.kwarg is not None


def source_signature(target: str) -> tuple[dict[str, Any], bool]:
    """``(keyword -> type hint, closed)`` of ``package.module.Name``, as
    :func:`ablate.config.types.signature` reads the imported object: a class's ``__init__`` and,
    through ``**kwargs``, its bases' in method resolution order; ``closed`` is False when
    ``**kwargs`` goes all the way up. :class:`Unresolved` when it reaches a base the source does not
    show (a module's ``__getattr__``, a class of a C extension): the caller then imports it."""
    found = resolve(target)
    if isinstance(found, FunctionRef):
        own, open_ = parameters(found.node, found.module)
        return own, not open_
    hints: dict[str, Any] = {}
    for cls in mro(found):
        if cls is None:
            raise Unresolved(f"{target}: a base the source does not show")
        function = _own_function(cls, "__init__")
        if function is None:
            continue
        own, open_ = parameters(function, cls.module)
        hints.update({k: v for k, v in own.items() if k not in hints})
        if not open_:
            return hints, True
    return hints, False


def class_attribute(target: str, name: str) -> tuple[str, ast.expr] | None:
    """``(module, expression)`` of the class attribute ``name`` of ``target``, through its bases:
    the expression a class body assigns and the module it is written in; None where none does."""
    found = resolve(target)
    if isinstance(found, FunctionRef):
        return None
    for cls in mro(found):
        if cls is None:
            raise Unresolved(f"{target}.{name}: a base the source does not show")
        for node in cls.node.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                raise Unresolved(f"{target}.{name}: a method, not a declared value")
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                return None if node.value is None else (cls.module, node.value)
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return cls.module, node.value
    return None


def declared_value(target: str, name: str, light: tuple[str, ...]) -> Any:
    """The value of the class attribute ``name`` of ``target`` (None where no class of it assigns
    one), evaluated from its source: a literal, or an expression (a rule's lambda,
    ``staticmethod(check)``) of builtins and of names imported from the standard library or from a
    module under one of the ``light`` packages, which are imported (:class:`Unresolved` for any
    other name: the caller then reads the imported class)."""
    found = class_attribute(target, name)
    if found is None:
        return None
    module, expression = found
    lambdas = [n.args for n in ast.walk(expression) if isinstance(n, ast.Lambda)]
    bound = {a.arg for arguments in lambdas for a in ast.walk(arguments) if isinstance(a, ast.arg)}
    namespace: dict[str, Any] = {}
    imported = definitions(module).imported
    for node in ast.walk(expression):
        if not isinstance(node, ast.Name) or node.id in namespace or node.id in bound:
            continue
        source, attribute = imported.get(node.id, ("", None))
        if attribute is not None and (
            _light(source) or any(source.split(".")[: len(p.split("."))] == p.split(".") for p in light)
        ):
            namespace[node.id] = getattr(importlib.import_module(source), attribute)
        elif not hasattr(builtins, node.id) or node.id in definitions(module).defined:
            raise Unresolved(f"{module}: {node.id}")
    return eval(compile(ast.Expression(expression), module, "eval"), namespace)  # our own source, light names
