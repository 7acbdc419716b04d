"""What to say when a command line sets a key the composed config does not have.

Hydra refuses ``data.splits=disjoint`` under ``data=multi30k`` with ``Key 'splits' is not in struct``:
it names the key but not what would work. :func:`unknown_key_hint` adds the keys the node does have
and, for a config group, the options of the group that do have the key (``data.splits`` is a key of
``data=tinyshakespeare`` only), read from ``conf/<group>/*.yaml`` with OmegaConf's YAML loader (no
code runs). It never suggests ``+key=``: a key that belongs to another option does not apply to
this one, and ablate's checks refuse it.

:func:`composition_error_message` says the same for every error Hydra's composition raises (an
unknown option: ``norm=prenorm`` -> did you mean ``norm=pre``; an override Hydra cannot parse: how
to quote it), so that :mod:`ablate.cli` can speak before Hydra does.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

from ablate.config.locations import checkout_root, project_root
from ablate.config.types import unknown_key_message


def _key_error(err: BaseException | None) -> ConfigAttributeError | ConfigKeyError | None:
    """The OmegaConf error behind Hydra's composition error (its cause chain), if any."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, (ConfigAttributeError, ConfigKeyError)) and isinstance(
            getattr(err, "parent_node", None), DictConfig
        ):
            return err
        err = err.__cause__ or err.__context__
    return None


def _has_key(path: Path, full_key: str, group: str) -> bool:
    """Whether the option file ``conf/<group>/<name>.yaml`` sets ``full_key``."""
    try:
        text = path.read_text(encoding="utf-8")
        node: Any = OmegaConf.create(text)  # YAML only: nothing in the file runs
    except Exception:  # an unreadable option file is Hydra's to report, not the hint's
        return False
    is_global = any("@package _global_" in line for line in text.split("\n", 3)[:3])
    key = full_key if is_global else full_key[len(group) + 1 :]
    return OmegaConf.select(node, key, default=None, throw_on_missing=False) is not None


def options_with_key(full_key: str, conf_dir: Path) -> tuple[str, list[str]]:
    """``(group, options)``: the options of ``full_key``'s top-level group that set it."""
    group = full_key.split(".", 1)[0]
    folder = conf_dir / group
    if "." not in full_key or not folder.is_dir():
        return group, []
    return group, sorted(p.stem for p in folder.glob("*.yaml") if _has_key(p, full_key, group))


def unknown_key_hint(err: BaseException | None, conf_dir: Path | None = None) -> str | None:
    """One paragraph for a user who set a key that is not in the config, or None for any other error."""
    found = _key_error(err)
    if found is None or not found.full_key:
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


def unknown_option_message(missing: str, options: list[str]) -> str:
    """``norm=prenorm is not an option of norm (did you mean norm=pre?); options: ...`` for Hydra's
    ``Could not find 'norm/prenorm'`` (``missing``: the group path and the name asked for)."""
    group, _, name = missing.rpartition("/")
    label = group.replace("/", ".") if group else "the config"
    close = _closest(name, options)
    hint = f" (did you mean {group}={close}?)" if close else ""
    return f"{group}={name} is not an option of {label}{hint}; options: {', '.join(options)}"


def quoting_advice(override: str) -> str:
    """How to type an override whose value Hydra's grammar cannot read unquoted (``=``, ``,``, spaces
    or brackets in a path): the value in single quotes for Hydra, inside double quotes for the shell."""
    key, sep, value = override.partition("=")
    if not sep or "'" in value:
        return "Quote the value for Hydra: key='value' (inside double quotes for the shell)"
    return f"Quote the value for Hydra, inside quotes for the shell: {key}=\"'{value}'\""


def composition_error_message(err: BaseException, conf_dir: Path | None = None) -> str:
    """What to tell a user whose command line Hydra could not compose: ours, never Hydra's
    ``To append to your config use +key=value`` (a key another option has does not apply to this
    one, and a misspelt key is not one to append)."""
    from hydra.errors import MissingConfigException, OverrideParseException

    hint = unknown_key_hint(err, conf_dir)
    if hint:
        return hint
    if isinstance(err, MissingConfigException) and err.missing_cfg_file and err.options:
        return unknown_option_message(str(err.missing_cfg_file), sorted(err.options))
    if isinstance(err, OverrideParseException):
        detail = str(err).split("\nSee https://", 1)[0]
        return f"cannot read the override {err.override}: {detail}. {quoting_advice(err.override)}"
    lines = [line for line in str(err).splitlines() if not line.startswith("To append to your config use")]
    return "\n".join(lines).strip() or type(err).__name__
