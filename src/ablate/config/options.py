"""Which keys each option of an architecture group takes, and the check that refuses the others.

A key that does not apply to the chosen option is an error, not a no-op: ``pos=sinusoidal
+pos.fraction=0.5`` would otherwise train plain sinusoidal positions while the run (and a sweep
over ``pos.fraction``) reports a fraction that was never used. The keys come from where each
option is implemented, so they are declared once: an option's typed config
(:mod:`ablate.nn.options`) has its class's keyword arguments besides the model dimensions, and
the axes table (:data:`ablate.nn.axes.AXES`) adds what a group's YAML carries for every option.
So ``pos=rope`` takes ``name``, ``base``, ``fraction``; ``norm`` takes ``placement``, ``layer``,
the chosen layer's options (``eps`` and ``bias`` for LayerNorm, ``alpha_init`` for DyT), and
``eps``/``bias`` left null for any layer; ``act`` takes ``match_params`` for the gated (GLU)
variants only; ``init`` takes ``std`` for ``gpt2``; ``attn`` takes ``impl`` and ``n_kv_heads``.

A value must also have its default's type (a float option accepts an int); null means unset
and is accepted for any key. The messages name the key, the option and its valid keys.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from ablate.errors import UserError


class ConfigError(UserError, ValueError):
    """An invalid configuration; the message says what to change."""


def _axes(group: str) -> list[Any]:
    from ablate.nn.axes import group_axes

    return group_axes(group)


def _chosen(axis: Any, node: Mapping[str, Any]) -> str | None:
    return node.get(axis.selector, axis.default)


def _option_keys(axis: Any, node: Mapping[str, Any]) -> dict[str, Any]:
    """``key -> default`` of the option ``node`` chose on ``axis`` (none for an unknown option)."""
    name = _chosen(axis, node)
    return axis.config_class(name).defaults() if name in axis.registry() else {}


def valid_keys(group: str, node: Mapping[str, Any]) -> dict[str, Any]:
    """``key -> default`` (``inspect.Parameter.empty`` when required) of the options chosen in
    ``node`` (the composed ``cfg[group]``): the group's selectors, the keys its YAML carries for
    every option, and the chosen options' own keys."""
    axes = _axes(group)
    if not axes:
        raise KeyError(group)
    keys: dict[str, Any] = dict.fromkeys(axis.selector for axis in axes)
    for axis in axes:
        keys.update(dict.fromkeys(axis.nullable_keys))
        keys.update(axis.shared_keys)
        keys.update(_option_keys(axis, node))
    return keys


def group_keys(group: str) -> tuple[str, ...]:
    """The keys a group's YAML carries whatever the option: its selectors, shared and nullable keys
    (``norm``: placement, layer, eps, bias); the rest of the group are the chosen options' own."""
    axes = _axes(group)
    return tuple(dict.fromkeys(k for a in axes for k in (a.selector, *a.nullable_keys, *a.shared_keys)))


def option_name(group: str, node: Mapping[str, Any]) -> str:
    """``pos=rope``, ``attn=sdpa``, ``norm.layer=rmsnorm``: the choice whose keys the group takes
    (for ``norm``, the layer's: its placement takes none of its own)."""
    axis = _axes(group)[-1]
    return f"{axis.label}={_chosen(axis, node)}"


def _type_ok(value: Any, default: Any) -> bool:
    if value is None or default is None or default is inspect.Parameter.empty:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, type(default))


def check_option_keys(cfg: Mapping[str, Any]) -> None:
    """Refuse a key of ``pos``/``norm``/``act``/``init``/``attn`` that the chosen option does not
    take, and a value of the wrong type, naming the option's valid keys."""
    from ablate.nn.axes import ARCHITECTURE_GROUPS

    for group in ARCHITECTURE_GROUPS:
        node = cfg.get(group)
        if node is None:
            continue
        axes = _axes(group)
        if any(node.get(a.selector) not in a.options() for a in axes if a.selector in node):
            continue  # an unknown option: config.validate lists the valid ones
        keys = valid_keys(group, node)
        for key, value in node.items():
            if value is None:
                continue  # null means unset (the option's default, or not applicable)
            if key not in keys:
                raise ConfigError(
                    f"{group}.{key} does not apply to {option_name(group, node)}: its keys are "
                    f"{', '.join(keys)}. Remove {group}.{key} (in a sweep: sweep it only with the options that take it)"
                )
            for axis in axes:
                if key in axis.nullable_keys and key not in _option_keys(axis, node):
                    raise ConfigError(
                        f"{group}.{key}={value} does not apply to {option_name(group, node)} (it has no {key}); "
                        f"leave {group}.{key}=null"
                    )
            if not _type_ok(value, keys[key]):
                raise ConfigError(
                    f"{group}.{key}={value!r} has the wrong type: expected {type(keys[key]).__name__} "
                    f"(default {keys[key]!r})"
                )
