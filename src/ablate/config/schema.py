"""The keys every config group accepts, each group's from one source, so that an unknown or
misspelt key (``+model.foo=1``, ``+decode.beam_sizee=3``, ``+logger.wandb.projet=x``) fails before
any data is read, naming the key and the valid ones.

The sources are the code that reads the keys, never a second list to keep in step:

- a node with ``_target_`` (``data``, ``trainer``, each ``callbacks.*``): the parameters of the
  target it instantiates (following ``**kwargs`` up the class hierarchy);
- ``model``: :data:`ablate.config.model.MODEL_KEYS` (what :func:`ablate.config.model.model_spec` reads);
- ``optim``: the run checks' rules and each optimiser's keys (:mod:`ablate.optim`);
- ``task``: the task class's ``config_keys``; ``decode``: :class:`ablate.tasks.decoding.DecodeConfig`;
  ``logger.*``: the options dataclasses of :mod:`ablate.tracking.options`. Those readers live in the
  layers above this one, which hand their keys in (``declared``: :func:`ablate.tasks.config_keys`,
  :func:`ablate.tracking.options.logger_keys`);
- ``eval``, ``log``, ``runtime``, ``paths``: declared below, next to nothing else that reads them.

A data class may also name the valid values of a key (``CONFIG_CHOICES``, e.g. Tiny Shakespeare's
``splits``): :func:`check_config_choices` refuses any other value, by name, before data is read.

The architecture groups (``pos``, ``norm``, ``act``, ``init``, ``attn``) are checked by
:mod:`ablate.config.options`, whose registries declare each option's keys. Hydra's structured configs
would need a dataclass per YAML option mirroring these sources; reading the sources keeps one truth.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ablate.config.options import ConfigError

EVAL_KEYS = frozenset({"test_at_end", "seq_len", "seq_lens"})
LOG_KEYS = frozenset({"grad_norm_every_n_steps", "grad_norm_dense_steps"})
RUNTIME_KEYS = frozenset({"flush_denormal", "matmul_precision"})
PATHS_KEYS = frozenset({"root_dir", "data_dir", "cache_dir", "log_dir", "output_dir"})


def target_keys(target: str) -> frozenset[str] | None:
    """The keyword arguments ``target`` accepts (a class: its ``__init__`` and, through
    ``**kwargs``, its bases'); None when it takes any keyword (nothing to check)."""
    from hydra.utils import get_object

    obj = get_object(target)
    functions: list[Callable[..., Any]] = (
        [vars(c)["__init__"] for c in obj.__mro__ if "__init__" in vars(c)] if inspect.isclass(obj) else [obj]
    )
    keys: set[str] = set()
    for function in functions:
        params = inspect.signature(function).parameters.values()
        keys.update(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self")
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return frozenset(keys)
    return None  # **kwargs all the way up (object.__init__ would refuse them, but a wrapper may not)


def group_keys(cfg: DictConfig, declared: Mapping[str, frozenset[str] | None]) -> dict[str, frozenset[str] | None]:
    """``config path -> the keys valid there`` for the groups of this composed config; ``declared``:
    those of the groups whose readers live above the config layer (the task's, the loggers')."""
    from ablate.config.checks import OPTIM_RULES
    from ablate.config.model import MODEL_KEYS
    from ablate.optim import OPTIMIZERS

    optim_keys = frozenset(OPTIM_RULES) | {k for kind in OPTIMIZERS.values() for k in kind.keys}
    keys: dict[str, frozenset[str] | None] = {
        "model": MODEL_KEYS,
        "optim": optim_keys | {"fused"},
        "eval": EVAL_KEYS,
        "log": LOG_KEYS,
        "runtime": RUNTIME_KEYS,
        "paths": PATHS_KEYS,
        **declared,
    }
    for path in ("data", "trainer", *(f"callbacks.{name}" for name in (cfg.get("callbacks") or {}))):
        node = OmegaConf.select(cfg, path) if isinstance(cfg, DictConfig) else _select(cfg, path)
        if isinstance(node, Mapping) and node.get("_target_"):
            found = target_keys(str(node["_target_"]))
            keys[path] = None if found is None else found | {"_target_", "_partial_", "_recursive_", "_convert_"}
    return keys


def _select(cfg: Mapping[str, Any], path: str) -> Any:
    node: Any = cfg
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def unknown_key_message(path: str, key: str, valid: Iterable[str]) -> str:
    """``path.key is not a key of path (did you mean ...?); valid keys: ...``; ``path`` "" is the top level."""
    valid = sorted(k for k in valid if not k.startswith("_"))
    prefix = f"{path}." if path else ""
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
    return f"{prefix}{key} is not a key of {path or 'the top level'}{hint}; valid keys: {', '.join(valid)}"


def check_config_keys(cfg: DictConfig, declared: Mapping[str, frozenset[str] | None]) -> None:
    """Refuse the first key that no code reads, naming it and the valid keys of its group
    (``declared``: as for :func:`group_keys`)."""
    for path, valid in group_keys(cfg, declared).items():
        node = OmegaConf.select(cfg, path) if isinstance(cfg, DictConfig) else _select(cfg, path)
        if valid is None or not isinstance(node, Mapping):
            continue
        for key in node:
            if str(key) not in valid:
                raise ConfigError(unknown_key_message(path, str(key), valid))


def check_config_choices(cfg: DictConfig) -> None:
    """Refuse a ``data`` value outside the choices its class declares (``CONFIG_CHOICES``: key ->
    valid values, e.g. Tiny Shakespeare's ``splits``), naming the key and the choices, before any
    data is read: the class is the one source of its choices, as its signature is of its keys."""
    from hydra.utils import get_object

    node = OmegaConf.select(cfg, "data") if isinstance(cfg, DictConfig) else _select(cfg, "data")
    if not isinstance(node, Mapping) or not node.get("_target_"):
        return
    choices: Mapping[str, tuple[Any, ...]] = getattr(get_object(str(node["_target_"])), "CONFIG_CHOICES", {})
    for key, valid in choices.items():
        if key in node and node[key] not in valid:
            raise ConfigError(f"data.{key}={node[key]!r} is invalid: one of {', '.join(map(str, valid))}")
