"""Which keys each option of an architecture group takes, and the check that refuses the others.

A key that does not apply to the chosen option is an error, not a no-op: ``pos=sinusoidal
+pos.fraction=0.5`` would otherwise train plain sinusoidal positions while the run (and a sweep
over ``pos.fraction``) reports a fraction that was never used. The keys come from where each
option is implemented, so they are declared once:

* ``pos``: the keyword arguments of the encoding's class (``POSITIONAL``), less the model
  dimensions every scheme receives (``d_model``, ``n_heads``, ``head_dim``, ``max_len``);
* ``norm``: ``placement`` and ``layer``, plus the options of the chosen layer (``NORM_LAYERS``:
  ``eps`` and ``bias`` for LayerNorm, ``eps`` for RMSNorm/ScaleNorm, ``alpha_init`` for DyT);
  ``eps``/``bias`` may stay null (the layer's default) for any layer;
* ``act``: ``match_params`` for gated (GLU) variants only (``GATES``);
* ``init``: ``std`` for the schemes that read it;
* ``attn``: ``impl`` and ``n_kv_heads`` for every implementation.

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


MODEL_DIMENSIONS = ("d_model", "n_heads", "head_dim", "max_len")  # passed to every positional scheme
NORM_KEYS = ("placement", "layer", "eps", "bias")  # the keys of conf/norm/*.yaml; the rest are layer options
INIT_WITH_STD = ("gpt2",)  # the schemes whose formula has a free standard deviation


def _class_options(factory: Any, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """``option -> default`` from a factory's keyword arguments (``**kwargs`` and ``skip`` left out)."""
    params = inspect.signature(factory).parameters.values()
    return {
        p.name: p.default for p in params if p.kind is not p.VAR_KEYWORD and p.name not in skip and p.name != "self"
    }


def valid_keys(group: str, node: Mapping[str, Any]) -> dict[str, Any]:
    """``key -> default`` (``inspect.Parameter.empty`` when required) of the option chosen in
    ``node`` (the composed ``cfg[group]``)."""
    from ablate.nn.ffn import GATES
    from ablate.nn.norms import NORM_LAYERS, layer_options
    from ablate.nn.positional import POSITIONAL

    if group == "pos":
        return {"name": None, **_class_options(POSITIONAL[node["name"]], MODEL_DIMENSIONS)}
    if group == "norm":
        layer = node.get("layer", "layernorm")
        if layer not in NORM_LAYERS:
            return dict.fromkeys(NORM_KEYS)  # the unknown layer is reported by config.validate
        return {"placement": None, "layer": None, "eps": None, "bias": None, **layer_options(layer)}
    if group == "act":
        return {"name": None, **({"match_params": True} if node["name"] in GATES else {})}
    if group == "init":
        return {"name": None, **({"std": 0.02} if node["name"] in INIT_WITH_STD else {})}
    if group == "attn":
        return {"impl": None, "n_kv_heads": None}
    raise KeyError(group)


def option_name(group: str, node: Mapping[str, Any]) -> str:
    """``pos=rope``, ``attn=sdpa``, ``norm.layer=rmsnorm``: the choice whose keys the group takes
    (for ``norm``, the layer's: its placement takes none of its own)."""
    from ablate.nn.axes import AXES

    axis = [a for a in AXES if a.group == group][-1]
    return f"{axis.label}={node.get(axis.selector, 'layernorm' if axis.key == 'norm.layer' else None)}"


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
    from ablate.nn.axes import ARCHITECTURE_GROUPS, AXES

    for group in ARCHITECTURE_GROUPS:
        node = cfg.get(group)
        if node is None:
            continue
        if any(node.get(a.selector) not in a.options() for a in AXES if a.group == group and a.selector in node):
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
            if key in ("eps", "bias") and group == "norm" and value is not None and key not in _layer_keys(node):
                raise ConfigError(
                    f"norm.{key}={value} does not apply to {option_name(group, node)} (it has no {key}); "
                    f"leave norm.{key}=null"
                )
            if not _type_ok(value, keys[key]):
                raise ConfigError(
                    f"{group}.{key}={value!r} has the wrong type: expected {type(keys[key]).__name__} "
                    f"(default {keys[key]!r})"
                )


def _layer_keys(node: Mapping[str, Any]) -> dict[str, Any]:
    from ablate.nn.norms import NORM_LAYERS, layer_options

    layer = node.get("layer", "layernorm")
    return layer_options(layer) if layer in NORM_LAYERS else {"eps": None, "bias": None}
