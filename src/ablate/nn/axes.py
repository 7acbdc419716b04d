"""The architecture axes in one table: which config group and key choose each option, the registry
of its options, and the :class:`~ablate.nn.spec.ModelSpec` field that holds the choice.

Everything that lists the axes iterates :data:`AXES`: the validation of a spec
(:func:`ablate.config.model.validate`), the keys of each option and the refusal of those an
option does not take (:mod:`ablate.config.options`), the build of each part of a stack
(:mod:`ablate.nn.stack`: each option builds itself from its typed config, :mod:`ablate.nn.options`), ``spec_axes(spec)`` (the flat names W&B, ``status.json`` and the
tables group runs by), the run names and W&B axis keys (:mod:`ablate.tracking.naming`), the order
of config groups in sweep directories, the config tree and the resume identity.

The key that selects an option is the group's own, as the README documents it (``pos.name``,
``norm.placement``, ``attn.impl``): renaming them would break every command line and config
that users have. The table says which it is, and which other keys a group's YAML carries, so no
code special-cases a group for it.

Light on purpose (the registries are imported when asked for): the naming of runs and the
resolvers of the configs read the table without importing torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ablate.nn.options import OptionConfig, option_config

if TYPE_CHECKING:
    from ablate.nn.attention import KernelConfig
    from ablate.nn.block import PlacementConfig
    from ablate.nn.ffn import FFNConfig
    from ablate.nn.init import InitConfig
    from ablate.nn.norms import NormLayerConfig
    from ablate.nn.positional import PositionalConfig
    from ablate.nn.spec import ModelSpec


# --- each axis' registry and config class, imported when first asked for -------------------


def _positional() -> tuple[Mapping[str, Any], type[PositionalConfig]]:
    from ablate.nn.positional import POSITIONAL, PositionalConfig

    return POSITIONAL, PositionalConfig


def _placements() -> tuple[Mapping[str, Any], type[PlacementConfig]]:
    from ablate.nn.block import PLACEMENTS, PlacementConfig

    return PLACEMENTS, PlacementConfig


def _norm_layers() -> tuple[Mapping[str, Any], type[NormLayerConfig]]:
    from ablate.nn.norms import NORM_LAYERS, NormLayerConfig

    return NORM_LAYERS, NormLayerConfig


def _feed_forwards() -> tuple[Mapping[str, Any], type[FFNConfig]]:
    from ablate.nn.ffn import FEED_FORWARDS, FFNConfig

    return FEED_FORWARDS, FFNConfig


def _inits() -> tuple[Mapping[str, Any], type[InitConfig]]:
    from ablate.nn.init import INITS, InitConfig

    return INITS, InitConfig


def _attention_kernels() -> tuple[Mapping[str, Any], type[KernelConfig]]:
    from ablate.nn.attention import ATTENTION_KERNELS, KernelConfig

    return ATTENTION_KERNELS, KernelConfig


def _none(spec: ModelSpec) -> Mapping[str, Any]:
    return {}


C = TypeVar("C", bound=OptionConfig)


@dataclass(frozen=True)
class Axis(Generic[C]):
    """One architecture choice: ``group`` (the config group, ``conf/<group>/``), ``selector``
    (the key of the group that names the option; ``default`` when absent), ``spec_field`` (the
    ``ModelSpec`` field, also the axis' flat name in ``status.json`` and W&B), ``options_and_config``
    (its registry and the config class of its options, :mod:`ablate.nn.options`).

    What the group's YAML carries besides the selector and the chosen option's own keys:
    ``shared_keys`` (``key -> default``) apply to every option (``attn.n_kv_heads``);
    ``nullable_keys`` may be null for every option and set only for one that takes them
    (``norm.eps``, ``norm.bias``). ``spec_options`` says where a ``ModelSpec`` keeps the chosen
    option's keys (the spec's flat fields are what checkpoints store)."""

    group: str
    selector: str
    spec_field: str
    options_and_config: Callable[[], tuple[Mapping[str, Any], type[C]]]
    spec_options: Callable[[ModelSpec], Mapping[str, Any]] = _none
    shared_keys: Mapping[str, Any] = field(default_factory=dict)
    nullable_keys: tuple[str, ...] = ()
    default: str | None = None

    @property
    def key(self) -> str:
        """The dotted config key: ``norm.layer``."""
        return f"{self.group}.{self.selector}"

    @property
    def label(self) -> str:
        """How messages name it: the group for its first axis (``pos``, ``attn``), the dotted key
        for a second one (``norm.layer``)."""
        first = next(a for a in AXES if a.group == self.group)
        return self.group if first is self else self.key

    def registry(self) -> Mapping[str, Any]:
        return self.options_and_config()[0]

    def options(self) -> list[str]:
        return list(self.registry())

    def config_class(self, name: str) -> type[C]:
        """The typed config of the option ``name`` (registered on this axis)."""
        registry, base = self.options_and_config()
        return option_config(base, name, registry[name])

    def config(self, spec: ModelSpec) -> C:
        """The typed config of the option ``spec`` chose on this axis, with the spec's values of
        its keys (those it does not take, and nulls, left out: the option's defaults apply)."""
        cls = self.config_class(getattr(spec, self.spec_field))
        taken = cls.defaults()
        return cls(**{k: v for k, v in self.spec_options(spec).items() if k in taken and v is not None})


POS = Axis("pos", "name", "pos", _positional, spec_options=lambda spec: spec.pos_options)
PLACEMENT = Axis("norm", "placement", "norm", _placements)
NORM_LAYER = Axis(
    "norm",
    "layer",
    "norm_layer",
    _norm_layers,
    spec_options=lambda spec: {"eps": spec.norm_eps, "bias": spec.norm_bias, **spec.norm_options},
    nullable_keys=("eps", "bias"),
    default="layernorm",
)
ACT = Axis("act", "name", "act", _feed_forwards, spec_options=lambda spec: {"match_params": spec.match_params})
INIT = Axis("init", "name", "init", _inits, spec_options=lambda spec: {"std": spec.init_std})
ATTN = Axis("attn", "impl", "attn", _attention_kernels, shared_keys={"n_kv_heads": None})

AXES: tuple[Axis[Any], ...] = (POS, PLACEMENT, NORM_LAYER, ACT, INIT, ATTN)

ARCHITECTURE_GROUPS = tuple(dict.fromkeys(axis.group for axis in AXES))
"""The config groups of the architecture, in table order: pos, norm, act, init, attn."""


def spec_axes(spec: ModelSpec) -> dict[str, Any]:
    """A spec's ablation axes, flat, for grouping runs in W&B and in the summary table
    (``pos``, ``norm``, ``norm_layer``, ``act``, ``init``, ``attn``: each axis' spec field and value)."""
    return {axis.spec_field: getattr(spec, axis.spec_field) for axis in AXES}


def group_axes(group: str) -> list[Axis[Any]]:
    """The axes of a config group, in table order (``norm``: placement, then layer)."""
    return [axis for axis in AXES if axis.group == group]
