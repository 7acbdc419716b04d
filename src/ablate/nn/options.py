"""The typed config of each option of an architecture axis, read from the option's own source.

An option is a class or factory in its axis' registry (``POSITIONAL`` in :mod:`ablate.nn.positional`,
...; the axes: :data:`ablate.nn.axes.AXES`). Its keyword parameters besides the *dimensions* its
axis supplies when it builds one (``d_model``, ``max_len``, the sub-layer, ...) are its options,
declared once, where it is implemented, with their types and defaults: ``Rotary(head_dim, base:
float = 10000.0, fraction: float = 1.0)`` is ``pos=rope`` with the keys ``base`` and ``fraction``.

:func:`option_configs` reads them from the module's source with :mod:`ast` (:mod:`ablate.source`,
the reader of the targets Hydra builds too), without importing it:
a command line is composed and checked before torch is imported (:mod:`ablate.cli`). The registry
is a dict literal of names the module defines (``**dict.fromkeys(NAMES, Class)`` gives one class
to every key of another literal); a class's options are those of its constructor (``__init__``, or
the axis' ``constructor``), looked up through its bases in the module; a factory's are its
parameters; every default is a literal. ``tests/nn/test_options.py`` holds this reading against
:mod:`inspect` of the imported options, every one of them, so the two cannot drift.

Each option's config is a frozen dataclass, :class:`OptionConfig` ``pos[rope](base=10000.0,
fraction=1.0)``, with the option's docstring (its paper). Like OLMo-core's config dataclasses it is
plain data until built: ``build(*dims)`` imports the option and makes it with the model's
dimensions; ``validate(spec)`` asks the option (``check_options(spec, **options)``, raising
``ValueError`` naming the key to change) whether it can serve the whole spec: ``Rotary``, an odd
rotary dimension; DeepNorm and DeepNet, one without the other.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import importlib.util
from typing import Any, ClassVar

from ablate.source import Unresolved, declared_value, definitions, hint


class OptionConfig:
    """Base of the typed option configs (each made by :func:`option_configs`)."""

    axis: ClassVar[str]  # the axis' name (``pos``, ``norm_layer``)
    name: ClassVar[str]  # the option's name in its registry (``rope``)
    registry: ClassVar[str]  # ``module:REGISTRY``
    constructor: ClassVar[str | None]  # the class method that builds it, when not the class itself
    dimensions: ClassVar[tuple[str, ...]]  # the parameters the axis passes

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as what makes it (a made class has no importable name): a job's ranks get it so."""
        made = (self.axis, self.registry, self.constructor, self.dimensions)
        return _remade, (made, self.name, self.options())

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """``key -> default``, in declaration order."""
        return {f.name: f.default for f in dataclasses.fields(cls)}  # type: ignore[arg-type]

    def options(self) -> dict[str, Any]:
        """The option's keys and their values, to build it with."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @property
    def option(self) -> Any:
        """The registered class or factory (importing its module: torch)."""
        module, _, registry = self.registry.partition(":")
        return getattr(importlib.import_module(module), registry)[self.name]

    def build(self, *dims: Any, **named_dims: Any) -> Any:
        """The option made with the axis' dimensions and its keys."""
        make = getattr(self.option, self.constructor) if self.constructor else self.option
        return make(*dims, **named_dims, **self.options())

    def _check(self) -> Any:
        """The option's ``check_options``, read from its class's source where it is declared as a
        function of :mod:`ablate.nn.option_checks` (no torch), else from the imported option."""
        module, _, registry = self.registry.partition(":")
        names = _definitions(module)
        defined = _registry(names, names[registry])[self.name]
        try:
            return declared_value(f"{module}.{defined}", "check_options", ("ablate.nn.option_checks",))
        except Unresolved:
            return getattr(self.option, "check_options", None)

    def validate(self, spec: Any) -> None:
        """Raise ``ValueError`` (naming the key to change) when the option cannot serve ``spec`` (a
        :class:`~ablate.nn.spec.ModelSpec`)."""
        check = self._check()
        if check is not None:
            check(spec, **self.options())


def _definitions(module: str) -> dict[str, ast.AST]:
    """The top-level classes, functions and assigned values of ``module``, by name (not imported)."""
    return definitions(module).defined


def _registry(names: dict[str, ast.AST], node: ast.AST) -> dict[str, str]:
    """``option -> the name it is registered as`` of a registry's dict literal."""
    if isinstance(node, ast.Name):
        return _registry(names, names[node.id])
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "dict.fromkeys":
        return dict.fromkeys(_registry(names, node.args[0]), ast.unparse(node.args[1]))
    if isinstance(node, ast.Dict):
        entries: dict[str, str] = {}
        for key, value in zip(node.keys, node.values):
            entries.update(_registry(names, value) if key is None else {ast.literal_eval(key): ast.unparse(value)})
        return entries
    raise TypeError(f"a registry is a dict literal (or dict.fromkeys of one), not {ast.unparse(node)}")


def _signature(names: dict[str, ast.AST], name: str, method: str) -> tuple[ast.arguments, bool] | None:
    """The parameters of the function ``name``, or of the method ``method`` of the class ``name``
    (found through its bases in the module; None: it has none of its own, as ``object``), and
    whether the first one is ``self``/``cls``."""
    node = names.get(name)
    if isinstance(node, ast.FunctionDef):
        return node.args, False
    if isinstance(node, ast.ClassDef):
        own = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == method), None)
        if own is not None:
            return own.args, not any(ast.unparse(d) == "staticmethod" for d in own.decorator_list)
        for base in node.bases:
            found = _signature(names, ast.unparse(base), method)
            if found is not None:
                return found
    return None


def option_fields(module: str, option: str, method: str, dimensions: tuple[str, ...]) -> list[tuple[str, Any, Any]]:
    """``(key, type, default)`` of the option registered as ``option``'s keys, read from the source."""
    names = _definitions(module)
    found = _signature(names, option, method)
    if found is None:
        return []
    args, bound = found
    positional = [*args.posonlyargs, *args.args][1 if bound else 0 :]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    parameters = [*zip(positional, defaults), *zip(args.kwonlyargs, args.kw_defaults)]
    fields = []
    for arg, default in parameters:
        if arg.arg in dimensions:
            continue
        if default is None:
            raise TypeError(f"{module}.{option}: {arg.arg} is neither a dimension of its axis nor has a default")
        fields.append((arg.arg, hint(arg.annotation, module), ast.literal_eval(default)))
    return fields


@functools.cache
def option_configs(
    axis: str, registry: str, constructor: str | None, dimensions: tuple[str, ...]
) -> dict[str, type[OptionConfig]]:
    """``option -> its typed config`` of the registry ``module:NAME`` (an axis' options)."""
    module, _, variable = registry.partition(":")
    names = _definitions(module)
    configs: dict[str, type[OptionConfig]] = {}
    for option, defined in _registry(names, names[variable]).items():
        fields = option_fields(module, defined, constructor or "__init__", dimensions)
        source = names.get(defined)
        namespace = {
            "__doc__": ast.get_docstring(source) if isinstance(source, (ast.ClassDef, ast.FunctionDef)) else None,
            **{
                "axis": axis,
                "name": option,
                "registry": registry,
                "constructor": constructor,
                "dimensions": dimensions,
            },
        }
        configs[option] = dataclasses.make_dataclass(
            f"{axis}[{option}]",
            [(key, hint, dataclasses.field(default=default)) for key, hint, default in fields],
            bases=(OptionConfig,),
            frozen=True,
            kw_only=True,
            namespace=namespace,
        )
        configs[option].__module__ = __name__
    return configs


def _remade(made: tuple[Any, ...], name: str, options: dict[str, Any]) -> OptionConfig:
    return option_configs(*made)[name](**options)
