"""What ablate declares in Hydra's ConfigStore: the architecture groups (``pos``, ``norm``, ``act``,
``init``, ``attn``), each option a structured config made from the table of axes
(:func:`ablate.nn.axes.group_node`: its keys with their types and defaults, no YAML), and the config
``architecture`` that chooses every group's default (``conf/train.yaml``'s defaults list names it);
and the schema of a run config section (:func:`store_section`: ``schema/optim``, the keys of
:class:`ablate.run.config.OptimConfig` with their defaults), which a group's YAML extends, so that it
holds only what differs (``conf/optim/noam.yaml``): the defaults live once, in the section.

Registered when this module is imported: by :mod:`ablate.cli` (every entry point) and by the
search-path plugin ``hydra_plugins.ablate_sweepers.architecture`` when the primary config folder is
ablate's (it holds ``train.yaml``), so the groups are there for an installed copy too (``structured://`` is always on
Hydra's search path). Light on purpose (no torch): a refusal costs the composition only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hydra.core.config_store import ConfigStore

from ablate.nn.axes import ARCHITECTURE_GROUPS, group_axes, group_node

DEFAULTS = "architecture"  # the config that chooses every group's default option


def register(store: ConfigStore | None = None) -> None:
    """Store every architecture group's options and the config ``architecture`` (idempotent)."""
    store = store or ConfigStore.instance()
    for group in ARCHITECTURE_GROUPS:
        for option in group_axes(group)[0].options():
            store.store(group=group, name=option, node=group_node(group, option))
    store.store(name=DEFAULTS, node={"defaults": [{g: group_axes(g)[0].default} for g in ARCHITECTURE_GROUPS]})


def store_section(section: Any) -> None:
    """Store ``schema/<PATH>``: the keys of a run config section (a dataclass of
    :mod:`ablate.run.config`) with its defaults, each of type ``Any``: the section itself checks
    types and ranges, with its own messages, after Hydra composes. A group's YAML extends it
    (``defaults: [/schema/optim@_here_, _self_]``)."""
    fields = [(f.name, Any, dataclasses.field(default=f.default)) for f in dataclasses.fields(section) if f.init]
    node = dataclasses.make_dataclass(f"{section.PATH}_schema", fields)
    ConfigStore.instance().store(group="schema", name=section.PATH, node=node)


register()
