"""Hydra's composition errors in ablate's words (:func:`composition_error_message`, exit 2).

Hydra's ``Key 'splits' is not in struct`` names the key but not what would work:
:func:`unknown_key_hint` adds the keys the node has and the options of the group that have the key
(``data.splits``: ``data=tinyshakespeare`` only), never ``+key=`` (a key of another option does not
apply to this one). Also: an unknown option (did you mean ``norm=pre``), a value of the wrong type
(``pos.base=abc``), an override Hydra cannot parse (how to quote it).
"""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import DictConfig
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from ablate.config.key_hints import options_with_key
from ablate.config.locations import checkout_root, project_root
from ablate.config.types import unknown_key_message, wrong_type_message

E = TypeVar("E", bound=BaseException)


def _cause(err: BaseException | None, kind: type[E]) -> E | None:
    """The OmegaConf error of ``kind`` with a key behind Hydra's composition error (its cause chain)."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, kind) and getattr(err, "full_key", None):
            return err
        err = err.__cause__ or err.__context__
    return None


def unknown_key_hint(err: BaseException | None, conf_dir: Path | None = None) -> str | None:
    """One paragraph for a user who set a key that is not in the config, or None for any other error."""
    found = _cause(err, (ConfigAttributeError, ConfigKeyError))  # type: ignore[arg-type]
    if found is None or not isinstance(found.parent_node, DictConfig):
        return None
    full_key = str(found.full_key)
    parent_key, _, key = full_key.rpartition(".")
    hint = unknown_key_message(parent_key, key, (str(k) for k in found.parent_node)) + "."
    conf_dir = conf_dir or (checkout_root() or project_root()) / "conf"
    group, options = options_with_key(full_key, conf_dir)
    if options:
        choices = ", ".join(f"{group}={name}" for name in options)
        hint += f" '{full_key}' is a key of {choices} only."
    return hint


def _closest(name: str, options: list[str]) -> str | None:
    """The option ``name`` most likely meant: one it starts with or that starts with it
    (``prenorm`` -> ``pre``), else the closest spelling."""
    prefixed = sorted((o for o in options if name.startswith(o) or o.startswith(name)), key=len, reverse=True)
    if prefixed:
        return prefixed[0]
    close = difflib.get_close_matches(name, options, n=1)
    return close[0] if close else None


def _other_axis(group: str, name: str) -> str | None:
    """``norm.layer=rmsnorm`` when ``name`` is no option of ``group`` but one of another axis of it."""
    from ablate.nn.axes import ARCHITECTURE_GROUPS, group_axes

    if group not in ARCHITECTURE_GROUPS:
        return None
    axis = next((a for a in group_axes(group)[1:] if name in a.options()), None)
    return f"{axis.key}={name}" if axis else None


def unknown_option_message(missing: str, options: list[str]) -> str:
    """``norm=prenorm is not an option of norm (did you mean norm=pre?); options: ...`` for Hydra's
    ``Could not find 'norm/prenorm'``; another axis' option is pointed at (``norm.layer=rmsnorm``)."""
    group, _, name = missing.rpartition("/")
    label = group.replace("/", ".") if group else "the config"
    close = _other_axis(group, name) or (f"{group}={found}" if (found := _closest(name, options)) else None)
    hint = f" (did you mean {close}?)" if close else ""
    return f"{group}={name} is not an option of {label}{hint}; options: {', '.join(options)}"


def quoting_advice(override: str) -> str:
    """How to type an override whose value Hydra cannot read unquoted: single quotes inside double quotes."""
    key, sep, value = override.partition("=")
    if not sep or "'" in value:
        return "Quote the value for Hydra: key='value' (inside double quotes for the shell)"
    return f"Quote the value for Hydra, inside quotes for the shell: {key}=\"'{value}'\""


def composition_error_message(err: BaseException, conf_dir: Path | None = None) -> str:
    """What to tell a user whose command line Hydra could not compose: ours, never Hydra's
    ``To append to your config use +key=value``."""
    from hydra.errors import MissingConfigException, OverrideParseException

    hint = unknown_key_hint(err, conf_dir)
    if hint:
        return hint
    invalid = _cause(err, ValidationError)
    if invalid is not None and dataclasses.is_dataclass(invalid.object_type):  # a registered option's key
        key = str(invalid.full_key).rpartition(".")[2]
        expected = {f.name: f.type for f in dataclasses.fields(invalid.object_type)}.get(key, Any)
        return wrong_type_message(str(invalid.full_key), invalid.value, expected)
    if isinstance(err, MissingConfigException) and err.missing_cfg_file and err.options:
        return unknown_option_message(str(err.missing_cfg_file), sorted(err.options))
    if isinstance(err, OverrideParseException):
        detail = str(err).split("\nSee https://", 1)[0]
        return f"cannot read the override {err.override}: {detail}. {quoting_advice(err.override)}"
    lines = [line for line in str(err).splitlines() if not line.startswith("To append to your config use")]
    return "\n".join(lines).strip() or type(err).__name__
