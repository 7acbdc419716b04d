"""Every config value has the type the code that reads it expects, checked before any data is read.

Without this check a wrong type either crashes deep inside (``model.n_layers=abc``: a TypeError in
``range``; ``trainer.precision=7``: Lightning's error after the run header) or, worse, is taken as
another value (``model.d_model=true`` built a model of width 1: ``True == 1`` in Python). Like the
key sets of :mod:`ablate.config.schema`, the types come from the code that reads the values:

- a node with ``_target_`` (``data``, ``trainer``, each ``callbacks.*``): the type hints of the
  target's parameters (``trainer.precision``: Lightning's ``Literal`` of precisions);
- ``model``: :class:`ablate.nn.spec.ModelSpec`'s fields, with the config's own nullable keys
  (:data:`MODEL_CONFIG_TYPES`); ``decode``: :class:`ablate.tasks.decoding.DecodeConfig`;
  ``logger.*``: the option dataclasses of :mod:`ablate.tracking.options`;
- the top level, ``eval``, ``log``, ``runtime``, ``paths``: declared in :mod:`ablate.config.schema`.

``optim`` has its value rules (:data:`ablate.config.checks.OPTIM_RULES`), the architecture groups
theirs (:mod:`ablate.config.options`). Rules: ``bool`` is not an ``int``; a ``float`` accepts an
``int``; null only where the hint allows ``None``; a node with ``_target_`` stands for the object
Hydra builds from it. An annotation this module cannot judge accepts any value: a missing check,
never a false refusal.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import os
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import Any, Literal, Union

from omegaconf import DictConfig, ListConfig, OmegaConf

from ablate.config.options import ConfigError

# the groups read by code that has no signature to read: each key with its type (ablate.config.types)
EVAL_TYPES: dict[str, Any] = {"test_at_end": bool, "seq_len": int | None, "seq_lens": list[int] | None}
LOG_TYPES: dict[str, Any] = {"grad_norm_every_n_steps": int, "grad_norm_dense_steps": int}
RUNTIME_TYPES: dict[str, Any] = {
    "flush_denormal": bool,
    # torch.set_float32_matmul_precision's, or auto (ablate.config.checks.matmul_precision)
    "matmul_precision": Literal["auto", "highest", "high", "medium"],
}
PATHS_TYPES: dict[str, Any] = {
    **dict.fromkeys(("root_dir", "data_dir", "cache_dir", "log_dir"), str),
    "output_dir": Any,  # Hydra's job directory, set by Hydra itself
}
# the top level of conf/train.yaml (its keys; the groups are checked by their own sources)
TOP_LEVEL_TYPES: dict[str, Any] = {
    "seed": int,
    "tags": list[str] | str,
    "ckpt_path": str | None,
    "trust_checkpoint": bool,
    "overwrite": bool,
    "resume_allow_changes": list[str],
    "sweep_name": str | None,
    "skip_completed": bool,
    "optimized_metric": str | None,
    "print_config": bool,
}

_SEQUENCES = (list, tuple, collections.abc.Sequence, collections.abc.Iterable, collections.abc.Collection)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)

# ``model`` keys that only the config has, or that the config may leave null (derived by model_spec)
MODEL_CONFIG_TYPES: dict[str, Any] = {
    "n_layers": int,
    "encoder_layers": int,
    "decoder_layers": int,
    "d_ff": int | None,  # null: 4 * d_model
    "max_len": int | None,  # null: the longest data length
    "tie_embeddings": bool | str,  # an encoder-decoder also takes "decoder" (ablate.nn.seq2seq.TIE_MODES)
    "compile": bool,
}


def type_ok(value: Any, hint: Any) -> bool:
    """Whether a config value (plain Python, as OmegaConf gives it) fits the type hint ``hint``."""
    if hint is Any or hint is inspect.Parameter.empty or isinstance(hint, (str, typing.ForwardRef, typing.TypeVar)):
        return True
    origin = typing.get_origin(hint)
    if origin is Union or origin is types.UnionType:
        return any(type_ok(value, arg) for arg in typing.get_args(hint))
    if origin is Literal:  # 16 is not "16", True is not 1
        return any(value == arg and type(value) is type(arg) for arg in typing.get_args(hint))
    if hint is None or hint is type(None):
        return value is None
    if value is None:
        return False
    if isinstance(value, Mapping) and "_target_" in value:
        return True  # Hydra builds the object; its keys are checked with its target's
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in _SEQUENCES or hint in _SEQUENCES:
        if not isinstance(value, (list, tuple)):
            return False
        args = typing.get_args(hint)
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(args) == len(value) and all(type_ok(v, a) for v, a in zip(value, args))
        return not args or all(type_ok(v, args[0]) for v in value)
    if origin in _MAPPINGS or hint in _MAPPINGS:
        return isinstance(value, Mapping)
    if isinstance(hint, type):
        if issubclass(hint, (PurePath, os.PathLike)):
            return isinstance(value, str)
        return isinstance(value, hint)
    return True  # an annotation we cannot judge


def describe(hint: Any) -> str:
    """``an integer``, ``null or an integer``, ``one of 64, 32, '16-mixed', ...``: for the message."""
    origin = typing.get_origin(hint)
    if origin is Union or origin is types.UnionType:
        args = typing.get_args(hint)
        literals = [v for a in args if typing.get_origin(a) is Literal for v in typing.get_args(a)]
        others = [describe(a) for a in args if typing.get_origin(a) is not Literal and a is not type(None)]
        parts = ([f"one of {', '.join(map(repr, literals))}"] if literals else []) + others
        if type(None) in args:
            parts.insert(0, "null")
        return " or ".join(parts)
    if origin is Literal:
        return f"one of {', '.join(map(repr, typing.get_args(hint)))}"
    if hint is None or hint is type(None):
        return "null"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if hint in names:
        return names[hint]
    if origin in _SEQUENCES or hint in _SEQUENCES:
        args = typing.get_args(hint)
        return f"a list of {describe(args[0]).removeprefix('a ').removeprefix('an ')}s" if args else "a list"
    if origin in _MAPPINGS or hint in _MAPPINGS:
        return "a mapping"
    return getattr(hint, "__name__", str(hint))


def parameter_hints(function: Callable[..., Any]) -> dict[str, Any]:
    """``parameter -> type hint`` of a function or class (its ``__init__`` and, through
    ``**kwargs``, its bases'); a hint that does not resolve is left out (not checked)."""
    functions: list[Callable[..., Any]] = (
        [vars(c)["__init__"] for c in function.__mro__ if "__init__" in vars(c)]
        if inspect.isclass(function)
        else [function]
    )
    hints: dict[str, Any] = {}
    for fn in functions:
        try:
            resolved = typing.get_type_hints(fn)
        except Exception:  # a hint naming what only TYPE_CHECKING imports: resolve them one by one
            resolved = {}
            for name, annotation in getattr(fn, "__annotations__", {}).items():
                try:
                    resolved[name] = (
                        eval(annotation, getattr(fn, "__globals__", {})) if isinstance(annotation, str) else annotation
                    )
                except Exception:
                    continue
        params = inspect.signature(fn).parameters.values()
        for p in params:
            if p.name in resolved and p.name not in hints and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                hints[p.name] = resolved[p.name]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return hints


def dataclass_hints(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def model_types() -> dict[str, Any]:
    """``model.<key> -> hint``: :class:`~ablate.nn.spec.ModelSpec`'s fields for the keys the ``model``
    group shares with it, :data:`MODEL_CONFIG_TYPES` for the config's own."""
    from ablate.config.model import MODEL_KEYS
    from ablate.nn.spec import ModelSpec

    spec = dataclass_hints(ModelSpec)
    return {k: MODEL_CONFIG_TYPES.get(k, spec.get(k, Any)) for k in MODEL_KEYS}


def group_types(cfg: DictConfig, declared: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``config path -> {key: hint}`` for the groups of this composed config ("" is the top level);
    ``declared``: the types of groups whose readers live above this layer (``decode``, the loggers':
    :func:`ablate.tasks.config_keys`, :func:`ablate.tracking.options.logger_keys`; a group declared
    by its keys alone has no types to check)."""
    from hydra.utils import get_object

    found: dict[str, dict[str, Any]] = {
        "": dict(TOP_LEVEL_TYPES),
        "model": model_types(),
        "eval": dict(EVAL_TYPES),
        "log": dict(LOG_TYPES),
        "runtime": dict(RUNTIME_TYPES),
        "paths": dict(PATHS_TYPES),
        **{path: dict(hints) for path, hints in declared.items() if isinstance(hints, Mapping)},
    }
    for path in ("data", "trainer", *(f"callbacks.{name}" for name in (cfg.get("callbacks") or {}))):
        node = OmegaConf.select(cfg, path)
        if isinstance(node, Mapping) and node.get("_target_"):
            found[path] = parameter_hints(get_object(str(node["_target_"])))
    return found


def resolved_items(node: DictConfig) -> list[tuple[str, Any, bool]]:
    """``(key, value, resolved)`` of a config node's keys: the value resolved and plain, or
    ``resolved=False`` when it does not resolve here (``${hydra:runtime.output_dir}`` before a job)."""
    items = []
    for key in node:
        try:
            value = node[key]
            value = (
                OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value
            )
            items.append((str(key), value, True))
        except Exception:
            items.append((str(key), None, False))
    return items


def _has_literal(hint: Any) -> bool:
    return typing.get_origin(hint) is Literal or any(_has_literal(a) for a in typing.get_args(hint))


def wrong_type_message(key: str, value: Any, hint: Any) -> str:
    shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value)
    problem = "is invalid" if _has_literal(hint) else "has the wrong type"
    return f"{key}={shown} {problem}: expected {describe(hint)}"


def check_node_types(node: Any, hints: Mapping[str, Any], prefix: str = "") -> None:
    """Refuse the first value of ``node`` whose type does not fit its key's hint, naming the key."""
    if not isinstance(node, DictConfig):
        return
    for key, value, resolved in resolved_items(node):
        if resolved and key in hints and not type_ok(value, hints[key]):
            raise ConfigError(wrong_type_message(f"{prefix}{key}", value, hints[key]))


def check_config_types(cfg: DictConfig, declared: Mapping[str, Any]) -> None:
    """Refuse the first value of a composed training config whose type is not the one the code
    reading it expects, naming the key and the expected type (:func:`group_types`)."""
    for path, hints in group_types(cfg, declared).items():
        node = cfg if not path else OmegaConf.select(cfg, path)
        check_node_types(node, hints, f"{path}." if path else "")
