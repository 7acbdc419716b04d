"""The typed config of an option of an architecture axis: its keys, ``build()`` and ``validate()``.

An option is a class (or factory) in its axis' registry (:data:`ablate.nn.axes.AXES`). Its
keyword parameters are its options, declared once, where it is implemented: everything but the
*dimensions* its axis supplies when it builds one (``d_model``, ``max_len``, the sub-layer, ...).
:func:`option_config` turns that signature into a frozen dataclass, a subclass of the axis'
config class (``PositionalConfig``, ``NormLayerConfig``, ``PlacementConfig``, ``FFNConfig``,
``InitConfig``, ``KernelConfig``), whose ``build`` makes the option's module with the model's
dimensions. So ``pos=rope pos.fraction=0.5`` becomes ``PositionalConfig[rope](base=10000,
fraction=0.5)`` and, in every stack, ``Rotary(head_dim=..., base=10000, fraction=0.5)``.

``validate(spec)`` asks the option whether it can serve the whole spec: an option class may
define ``check_options(spec, **options)``, raising ``ValueError`` with a message that names the
key to change (``Rotary``: an odd rotary dimension; DeepNorm and DeepNet: one without the other).
:func:`ablate.config.model.validate` turns that into a :class:`~ablate.config.options.ConfigError`
before any data is read. Like OLMo-core's config dataclasses, a config is plain data until built.

Light on purpose (no torch): the config checks read the keys without importing the models.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from ablate.nn.spec import ModelSpec

REQUIRED = inspect.Parameter.empty  # the default of an option that has none


class OptionConfig:
    """Base of the typed configs (each made by :func:`option_config`: a frozen dataclass whose
    fields are the option's keys, with its defaults)."""

    DIMENSIONS: ClassVar[tuple[str, ...]] = ()  # the parameters the axis supplies, not options
    name: ClassVar[str]  # the option's name in its registry (``rope``)
    option: ClassVar[Callable[..., Any]]  # the registered class or factory

    @classmethod
    def signature_of(cls, option: Callable[..., Any]) -> Callable[..., Any]:
        """The callable whose keyword parameters are the option's keys: the option itself."""
        return option

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """``key -> default`` (:data:`REQUIRED` when it has none), in declaration order."""
        return {
            f.name: REQUIRED if f.default is dataclasses.MISSING else f.default
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        }

    def options(self) -> dict[str, Any]:
        """The option's keys and their values, to build it with."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def validate(self, spec: ModelSpec) -> None:
        """Raise ``ValueError`` (naming the key to change) when the option cannot serve ``spec``."""
        check = getattr(self.option, "check_options", None)
        if check is not None:
            check(spec, **self.options())


def option_parameters(option: Callable[..., Any], dimensions: Iterable[str] = ()) -> dict[str, Any]:
    """``key -> default`` from ``option``'s signature: its parameters less ``self``, ``*args``,
    ``**kwargs`` and ``dimensions``; :data:`REQUIRED` for one without a default."""
    skip = set(dimensions)
    return {
        p.name: p.default
        for p in inspect.signature(option).parameters.values()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name not in skip and p.name != "self"
    }


C = TypeVar("C", bound=OptionConfig)
_CONFIGS: dict[tuple[type[OptionConfig], str, object], type[OptionConfig]] = {}


def option_config(base: type[C], name: str, option: Callable[..., Any]) -> type[C]:
    """The typed config of the option ``name`` (``option``, registered on the axis whose config
    class is ``base``): a frozen dataclass subclass of ``base`` named ``<base>[<name>]``, made once."""
    key = (base, name, option)
    if key not in _CONFIGS:
        _CONFIGS[key] = _make_config(base, name, option)
    return _CONFIGS[key]  # type: ignore[return-value]  # made from base


def _make_config(base: type[C], name: str, option: Callable[..., Any]) -> type[C]:
    source = base.signature_of(option)
    signed = source.__init__ if isinstance(source, type) else source  # type: ignore[misc]  # a class: its constructor's
    annotations = getattr(signed, "__annotations__", {})
    fields = [
        (
            key,
            annotations.get(key, Any),
            dataclasses.field() if default is REQUIRED else dataclasses.field(default=default),
        )
        for key, default in option_parameters(source, base.DIMENSIONS).items()
    ]
    cls = dataclasses.make_dataclass(
        f"{base.__name__}[{name}]",
        fields,
        bases=(base,),
        frozen=True,
        kw_only=True,  # keys by name, required ones anywhere among them
        namespace={"name": name, "option": staticmethod(option)},
    )
    cls.__module__ = base.__module__
    return cls
