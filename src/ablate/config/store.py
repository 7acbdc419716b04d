"""What ablate declares in Hydra's ConfigStore (no torch): the architecture groups, each option a
structured config (:func:`ablate.nn.axes.group_node`), and the config ``architecture`` choosing every
group's default (:func:`register`, called by :mod:`ablate.run.config` on import), and the schemas of
config sections (:func:`store_section`, called by :mod:`ablate.run.config` and, for the loggers,
:mod:`ablate.tracking.options`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from hydra.core.config_store import ConfigStore

from ablate.nn.axes import ARCHITECTURE_GROUPS, group_axes, group_node


def register() -> None:
    """Store every architecture group's options and the config ``architecture`` (idempotent)."""
    store = ConfigStore.instance()
    for group in ARCHITECTURE_GROUPS:
        for option in group_axes(group)[0].options():
            store.store(group=group, name=option, node=group_node(group, option))
    store.store(name="architecture", node={"defaults": [{g: group_axes(g)[0].default} for g in ARCHITECTURE_GROUPS]})


def store_section(section: Any, name: str = "", exclude: frozenset[str] = frozenset()) -> None:
    """Store ``schema/<name>`` (default: the section's ``PATH``, ``""`` for the root): a config
    dataclass' keys but ``exclude`` with its defaults, each of type ``Any`` (the dataclass checks them,
    with its own messages), so that the YAML holds only what differs (``defaults: [/schema/optim@_here_, _self_]``)."""
    path = getattr(section, "PATH", name)
    name = name or path
    fields = [
        (f.name, Any, dataclasses.field(default=f.default, default_factory=f.default_factory))
        for f in dataclasses.fields(section)
        if f.init and f.name not in exclude
    ]
    node: Any = dataclasses.make_dataclass(f"{name}_schema", fields)
    if not path:  # the root as a plain mapping: a structured one would close the whole config
        node = dataclasses.asdict(node())  # to the keys experiments add for their interpolations
    ConfigStore.instance().store(group="schema", name=name, node=node)
