"""The architecture axes in one table (:data:`AXES`): what chooses each option, where its options
are registered, its default and what a Hugging Face export makes of it.

A row is all there is to an axis besides its options' module and the code that builds its part:

* the options' typed configs are declared in :mod:`ablate.nn.options` (``OPTIONS[axis.name]``);
* each config group's options are Hydra's own (``pos=rope``; no YAML): a structured config per
  option (:func:`group_node`, stored in Hydra's ConfigStore by :mod:`ablate.config.store`),
  its keys with their types and defaults, so
  Hydra refuses a key or a value of the wrong type as it composes, and an option's keys need no ``+``;
* :class:`~ablate.nn.spec.ModelSpec` holds the chosen option of every row (``spec.options``),
  and writes and reads it as the row's name;
* the export (:mod:`ablate.export.hf`) refuses an option a row does not list for its target, and
  a row without an export entry;
* ``spec_axes(spec)`` (what W&B, ``status.json`` and the tables group runs by), the run names, the
  order of config groups in sweep directories, the resume identity, the tests' option lists and the
  docs' table of axes (:func:`markdown_table`) iterate the table.

The key that selects an option is the group's own, as the README documents it (``pos.name``,
``norm.placement``, ``attn.impl``). A group may hold a second axis, chosen by a value of the group
(``norm.layer``): the group's node then carries that axis' keys for every one of its options, null
(the option's default) unless set, and a key the chosen option does not take must stay null.

Light on purpose (no torch): the run names, the resolvers and the composition read the table.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from ablate.nn.options import OPTIONS, OptionConfig


@dataclass(frozen=True)
class Axis:
    """One architecture choice. ``name``: its key in ``ModelSpec.options``, ``status.json`` and W&B
    (and of its options' configs, :data:`ablate.nn.options.OPTIONS`); ``key``: the config key that
    names the option (``norm.layer``: group ``norm``, selector ``layer``); ``dimensions``: the
    parameters the code that builds an option passes (the rest are the option's keys); ``shared``: keys
    of the group that apply to every option, with their types, null by default, and are
    ``ModelSpec`` fields of the same name (``attn.n_kv_heads``);
    ``export``: Hugging Face target -> the options it maps (with their names there, where it names
    them), None where the axis does not change the exported function."""

    name: str
    key: str
    default: str
    dimensions: tuple[str, ...] = ()
    shared: Mapping[str, Any] = field(default_factory=dict, compare=False)
    export: Mapping[str, Collection[str] | None] | None = field(default=None, repr=False, compare=False)

    @property
    def group(self) -> str:
        return self.key.split(".")[0]

    @property
    def selector(self) -> str:
        return self.key.split(".")[1]

    @property
    def label(self) -> str:
        """How messages name it: the group for its first axis (``pos``), the key for a second."""
        return self.group if group_axes(self.group)[0] == self else self.key

    @property
    def module(self) -> str:
        """The module of :mod:`ablate.nn` that implements its options (``positional``)."""
        return self.config_class(self.default).target.partition(":")[0]

    def configs(self) -> dict[str, type[OptionConfig]]:
        return OPTIONS[self.name]

    def options(self) -> list[str]:
        return list(self.configs())

    def config_class(self, name: str) -> type[OptionConfig]:
        """The typed config of the option ``name``; unknown names are refused, listing the valid ones."""
        configs = self.configs()
        if name not in configs:
            from ablate.errors import ConfigError

            raise ConfigError(f"unknown {self.label}={name!r}; valid options: {', '.join(configs)}")
        return configs[name]


_ANY = dict.fromkeys(("gpt2", "llama"))  # the axis does not change the exported function
_GPT2_ACTS = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu", "silu": "silu", "relu2": "relu2"}
_LLAMA_GATES = {"swiglu": "silu", "geglu": "gelu", "reglu": "relu", "glu": "sigmoid", "bilinear": "linear"}
AXES: tuple[Axis, ...] = (
    Axis("pos", "pos.name", "learned", ("d_model", "n_heads", "head_dim", "max_len", "token_rms", "embed_scale"),
         export={"gpt2": ("learned",), "llama": ("rope",)}),
    Axis("norm", "norm.placement", "pre", ("make_norm", "stack"), export={"gpt2": ("pre",), "llama": ("pre",)}),
    Axis("norm_layer", "norm.layer", "layernorm", ("d_model",),
         export={"gpt2": ("layernorm",), "llama": ("rmsnorm",)}),
    Axis("act", "act.name", "gelu", ("d_model", "d_ff", "act", "bias", "dropout"),
         export={"gpt2": _GPT2_ACTS, "llama": _LLAMA_GATES}),
    Axis("init", "init.name", "xavier", export=_ANY),
    Axis("attn", "attn.impl", "sdpa", ("dropout",), shared={"n_kv_heads": int}, export=_ANY),
)  # fmt: skip
POS, PLACEMENT, NORM_LAYER, ACT, INIT, ATTN = AXES[:6]  # the README's six, by name

ARCHITECTURE_GROUPS = tuple(dict.fromkeys(axis.group for axis in AXES))
"""The config groups of the architecture, in table order: pos, norm, act, init, attn."""


def group_axes(group: str) -> list[Axis]:
    """The axes of a config group, in table order (``norm``: placement, then layer)."""
    return [axis for axis in AXES if axis.group == group]


def spec_axes(spec: Any) -> dict[str, str]:
    """A :class:`~ablate.nn.spec.ModelSpec`'s chosen options by axis name, flat (``pos``, ``norm``, ``norm_layer``, ``act``,
    ``init``, ``attn``), for grouping runs in W&B, ``status.json`` and the summary table."""
    return {axis.name: spec.option(axis.name).name for axis in AXES}


# --- the groups as Hydra's config groups -------------------------------------------------------


def _nullable(hint: Any) -> Any:
    return Any if hint is Any else Optional[hint]  # noqa: UP045  (OmegaConf reads typing's Optional)


def group_node(group: str, option: str) -> type:
    """The structured config of ``group=option``: the selectors, the shared keys, the option's
    keys with its defaults and a second axis' keys, null (its option's default) unless set. Every
    key takes null: the option's default (an experiment's interpolated option may not take it)."""
    first, *others = group_axes(group)
    config = first.config_class(option)
    fields: list[tuple[str, Any, Any]] = [(first.selector, str, option)]
    fields += [(axis.selector, str, axis.default) for axis in others]
    fields += [(key, _nullable(hint), None) for axis in group_axes(group) for key, hint in axis.shared.items()]
    fields += [(f.name, _nullable(f.type), f.default) for f in dataclasses.fields(config)]
    for axis in others:
        for name in axis.options():
            fields += [(f.name, _nullable(f.type), None) for f in dataclasses.fields(axis.configs()[name])]
    unique = {name: (name, hint, dataclasses.field(default=default)) for name, hint, default in fields[::-1]}
    node = dataclasses.make_dataclass(f"{group}_{option}", list(unique.values())[::-1])
    node.__doc__ = config.__doc__
    return node


# Option keys that must be a positive finite number wherever an option takes them: ``eps`` guards a
# division (0, a negative, NaN or inf makes the first step NaN, a run "diverged at step 1").
POSITIVE_KEYS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "eps": (
        lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0,
        "a positive finite number (e.g. 1e-5)",
    ),
}


def typed_options(groups: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The ``ModelSpec`` fields of the composed architecture groups: ``options`` (each axis' chosen
    option's typed config) and the shared keys. A key no chosen option takes is refused unless null
    (null: the option's default), naming the option's keys (``pos=sinusoidal +pos.fraction=0.5``)."""
    from ablate.errors import ConfigError

    options: dict[str, OptionConfig] = {}
    shared: dict[str, Any] = {}
    for group in ARCHITECTURE_GROUPS:
        node, axes = dict(groups.get(group) or {}), group_axes(group)
        chosen = {axis: axis.config_class(str(node.get(axis.selector, axis.default))) for axis in axes}
        keys = {k for axis in axes for k in (axis.selector, *axis.shared)}
        for key, value in node.items():
            owner = next((a for a, c in chosen.items() if key in c.defaults()), None)
            if key in keys or value is None or owner is not None:
                continue
            axis = next((a for a in axes[1:] if any(key in c.defaults() for c in a.configs().values())), None)
            if axis is not None:  # a second axis' key another of its options takes
                raise ConfigError(
                    f"{group}.{key}={value} does not apply to {axis.label}={chosen[axis].name} (it has no {key}); "
                    f"leave {group}.{key}=null"
                )
            valid = [*keys, *(k for c in chosen.values() for k in c.defaults())]
            raise ConfigError(
                f"{group}.{key} does not apply to {axes[-1].label}={chosen[axes[-1]].name}: its keys are "
                f"{', '.join(valid)}. Remove {group}.{key} (in a sweep: sweep it only with the options that take it)"
            )
        for axis, config in chosen.items():
            values = {k: node[k] for k in config.defaults() if node.get(k) is not None}
            for key, (accepts, expected) in POSITIVE_KEYS.items():
                if key in values and values[key] is not None and not accepts(values[key]):
                    raise ConfigError(f"{group}.{key}={values[key]!r} is invalid: {expected}")
            options[axis.name] = config(**values)
            shared.update({k: node[k] for k in axis.shared if k in node})
    return {"options": options, **shared}


def markdown_table() -> str:
    """The docs' table of the axes (``docs/architecture.md``), made from :data:`AXES`."""
    rows = ["| axis | config | options (default first) | module |", "|---|---|---|---|"]
    for axis in AXES:
        options = [axis.default, *(o for o in axis.options() if o != axis.default)]
        rows.append(f"| {axis.name} | `{axis.key}` | {', '.join(f'`{o}`' for o in options)} | `nn/{axis.module}.py` |")
    return "\n".join(rows)
