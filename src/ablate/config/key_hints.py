"""Which config group holds a key a user gave elsewhere (``lr=1e-3`` -> ``optim.lr``), the hints of the
unknown-key messages, read from ``conf/<group>/*.yaml`` (YAML only, no code runs) and the
architecture groups' options."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ablate.config.locations import checkout_root, project_root


def _has_key(path: Path, full_key: str, group: str) -> bool:
    """Whether the option file ``conf/<group>/<name>.yaml`` sets ``full_key``."""
    try:
        text = path.read_text(encoding="utf-8")
        node: Any = OmegaConf.create(text)  # YAML only: nothing in the file runs
    except Exception:  # an unreadable option file is Hydra's to report, not the hint's
        return False
    is_global = any("@package _global_" in line for line in text.split("\n", 3)[:3])
    key = full_key if is_global else full_key[len(group) + 1 :]
    node = _with_schemas(node)  # the keys the file leaves to the schemas it extends (ablate.config.store)
    return OmegaConf.select(node, key, default=None, throw_on_missing=False) is not None


def _with_schemas(node: Any) -> Any:
    """An option file's node over the schemas its defaults list extends (``/schema/<name>@<package>``)."""
    from hydra.core.config_store import ConfigStore

    layers: list[Any] = []
    for entry in [e for e in node.pop("defaults", None) or [] if str(e).startswith("/schema/")]:
        name, _, package = entry.removeprefix("/schema/").partition("@")
        with contextlib.suppress(Exception):  # not stored (ablate.run.config not imported): no keys of its own
            schema = OmegaConf.to_container(ConfigStore.instance().load(f"schema/{name}.yaml").node)
            layers.append(schema if package == "_here_" else {package: schema})
    return OmegaConf.merge(*layers, node)


def options_with_key(full_key: str, conf_dir: Path) -> tuple[str, list[str]]:
    """``(group, options)``: the options of ``full_key``'s top-level group that set it (a file of
    ``conf/<group>/``, or an architecture group's option: :func:`ablate.nn.axes.group_node`)."""
    from ablate.nn.axes import ARCHITECTURE_GROUPS, group_axes, group_node

    group, _, key = full_key.partition(".")
    if group in ARCHITECTURE_GROUPS:
        options = group_axes(group)[0].options()
        return group, sorted(o for o in options if key in {f.name for f in dataclasses.fields(group_node(group, o))})
    folder = conf_dir / group
    if not key or not folder.is_dir():
        return group, []
    return group, sorted(p.stem for p in folder.glob("*.yaml") if _has_key(p, full_key, group))


def groups_with_key(key: str, conf_dir: Path | None = None) -> list[str]:
    """``<group>.<key>`` for each config group with an option that has ``key`` (``lr`` ->
    ``optim.lr``): the hint for a group's key given at the top level."""
    from ablate.nn.axes import ARCHITECTURE_GROUPS

    conf_dir = conf_dir or (checkout_root() or project_root()) / "conf"
    groups = sorted({*(p.name for p in conf_dir.iterdir() if p.is_dir()), *ARCHITECTURE_GROUPS})
    return [f"{group}.{key}" for group in groups if options_with_key(f"{group}.{key}", conf_dir)[1]]
