"""Keys, types and rules of config values: the machinery of the typed config (:mod:`ablate.run.config`).

Without a type check a wrong type crashes deep inside or, worse, is taken as another value
(``model.d_model=true`` built a model of width 1). ``bool`` is not an ``int``; a ``float`` accepts
an ``int``; a node with ``_target_`` stands for the object Hydra builds. An annotation this module
cannot judge accepts any value: a missing check, never a false refusal.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import inspect
import os
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import PurePath
from typing import Any, Literal, Union

from omegaconf import DictConfig, ListConfig, OmegaConf

from ablate.errors import ConfigError

UNRESOLVED = object()  # a value that does not resolve where the config is checked (``${hydra:...}`` outside a job)
Rule = tuple[Callable[[Any], bool], str]  # (predicate, what the valid values are)

_SEQUENCES = (list, tuple, collections.abc.Sequence, collections.abc.Iterable, collections.abc.Collection)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


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


def _imported(target: Any) -> Any:
    """``target`` itself, or the object its name (``module.Name``) names."""
    if isinstance(target, str):
        from hydra.utils import get_object

        return get_object(target)
    return target


def signature(target: Any) -> tuple[dict[str, Any], bool]:
    """``(keyword -> type hint, closed)`` of a function or class (a class: its ``__init__`` and,
    through ``**kwargs``, its bases'); a hint that does not resolve (``TYPE_CHECKING``) is ``Any``;
    ``closed`` is False when ``**kwargs`` goes all the way up (any keyword is taken)."""
    target = _imported(target)
    functions = (
        [vars(c)["__init__"] for c in target.__mro__ if "__init__" in vars(c)] if inspect.isclass(target) else [target]
    )
    hints: dict[str, Any] = {}
    for function in functions:
        annotations, names = getattr(function, "__annotations__", {}), getattr(function, "__globals__", {})
        params = inspect.signature(function).parameters.values()
        for p in params:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self" and p.name not in hints:
                try:
                    hint = annotations.get(p.name, Any)
                    hints[p.name] = eval(hint, names) if isinstance(hint, str) else hint
                except Exception:
                    hints[p.name] = Any
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return hints, True
    return hints, False


def declared_rules(target: Any, added: Mapping[str, Rule] | None = None) -> dict[str, Rule]:
    """The rules a target class declares for its keyword arguments (``CONFIG_RULES``: key ->
    (predicate, valid values), then ``added``; ``CONFIG_CHOICES``: key -> the valid values)."""
    target = _imported(target)
    rules, choices = dict(getattr(target, "CONFIG_RULES", {})), dict(getattr(target, "CONFIG_CHOICES", {}))
    rules.update(added or {})  # those ablate adds (``added``) replace the class's own
    for key, valid in choices.items():
        rules[key] = (lambda v, c=valid: v in c, f"one of {', '.join(map(str, valid))}")
    return rules


def target_keys(target: Any) -> frozenset[str] | None:
    """The keyword arguments ``target`` accepts (:func:`signature`); None when it takes any."""
    hints, closed = signature(target)
    return frozenset(hints) if closed else None


def dataclass_hints(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _has_literal(hint: Any) -> bool:
    return typing.get_origin(hint) is Literal or any(_has_literal(a) for a in typing.get_args(hint))


def wrong_type_message(key: str, value: Any, hint: Any) -> str:
    shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value)
    problem = "is invalid" if _has_literal(hint) else "has the wrong type"
    return f"{key}={shown} {problem}: expected {describe(hint)}"


def unknown_key_message(path: str, key: str, valid: Iterable[str]) -> str:
    """``path.key is not a key of path (did you mean ...?); valid keys: ...``; ``path`` "" is the top level."""
    valid = sorted(k for k in valid if not k.startswith("_"))
    prefix = f"{path}." if path else ""
    close: list[str] = []
    if not path:  # a group's key given at the top level: lr=1e-3 for optim.lr=1e-3
        from ablate.config.key_hints import groups_with_key

        close = groups_with_key(key)
    close = close or [prefix + k for k in difflib.get_close_matches(key, valid, n=1)]
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    return f"{prefix}{key} is not a key of {path or 'the top level'}{hint}; valid keys: {', '.join(valid)}"


def plain_items(node: Any) -> list[tuple[str, Any]]:
    """``(key, value)`` of a config node, each value resolved and plain, else :data:`UNRESOLVED` (a
    sub-node that does not resolve whole stays a node: its keys are judged one by one)."""
    if not isinstance(node, DictConfig):
        return [(str(k), v) for k, v in (node or {}).items()]
    items: list[tuple[str, Any]] = []
    for key in node:
        try:
            value = node[key]
            if isinstance(value, (DictConfig, ListConfig)):
                try:
                    value = OmegaConf.to_container(value, resolve=True)
                except Exception:  # a key inside does not resolve here
                    value = value if isinstance(value, DictConfig) else UNRESOLVED
        except Exception:
            value = UNRESOLVED
        items.append((str(key), value))
    return items


def typed_values(node: Any, hints: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The values of ``node`` by key, refusing the first key not in ``hints`` and the first value
    whose type does not fit; values that do not resolve here are left out."""
    prefix = f"{path}." if path else ""
    values: dict[str, Any] = {}
    for key, value in plain_items(node):
        if key not in hints:
            raise ConfigError(unknown_key_message(path, key, hints))
        if value is UNRESOLVED:
            continue
        if not type_ok(value, hints[key]):
            raise ConfigError(wrong_type_message(f"{prefix}{key}", value, hints[key]))
        values[key] = value
    return values


def check_rules(values: Mapping[str, Any], path: str, rules: Mapping[str, Rule]) -> None:
    """Refuse the first value that its key's rule refuses: ``path.key=value is invalid: <valid values>``."""
    prefix = f"{path}." if path else ""
    for key, (predicate, valid) in rules.items():
        if key not in values or values[key] is UNRESOLVED:
            continue
        try:
            ok = bool(predicate(values[key]))
        except (TypeError, ValueError):  # a value of another type (optim.betas=0.9: no len())
            ok = False
        if not ok:
            raise ConfigError(f"{prefix}{key}={values[key]!r} is invalid: {valid}")


def top_level_key_message(key: str, valid: list[str]) -> str:
    """:func:`unknown_key_message` at the top level and, for a config group without a node of its
    own (``debug``), how to choose one of its options."""
    from ablate.config.locations import conf_dir  # here: the light modules need no locations

    message = unknown_key_message("", key, valid)
    group = conf_dir() / key
    if group.is_dir():
        options = ", ".join(sorted(p.stem for p in group.glob("*.yaml")))
        message += f". {key} is a config group: choose one of its options with {key}=<name> ({options})"
    return message
