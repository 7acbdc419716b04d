"""``ablate://``: the architecture groups (``pos``, ``norm``, ...) as a config source of their own.

Each option of a group is a structured config made from its class (:func:`ablate.nn.axes.group_node`;
no YAML), and the config ``architecture`` lists every group's default. :class:`ArchitectureSearchPath`
puts the source on the search path of ablate's own configs only (a checkout's ``conf/``, whichever
of its files is the primary one: ``train.yaml``, ``benchmark.yaml``), so a Hydra application of its
own with a key ``norm`` is not told that it has a config group ``norm``.
"""

from __future__ import annotations

from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

from ablate.nn.axes import ARCHITECTURE_GROUPS, group_axes, group_node

DEFAULTS = "architecture"  # the config that chooses every group's default option


class ArchitectureGroups(ConfigSource):
    """The groups' options, read from the table of axes when Hydra asks for them."""

    @staticmethod
    def scheme() -> str:
        return "ablate"

    def available(self) -> bool:
        return True

    def load_config(self, config_path: str) -> ConfigResult:
        group, _, option = self._normalize_file_name(config_path).removesuffix(".yaml").rpartition("/")
        if group:
            node = OmegaConf.structured(group_node(group, option))
        else:
            node = OmegaConf.create({"defaults": [{g: group_axes(g)[0].default} for g in ARCHITECTURE_GROUPS]})
        return ConfigResult(config=node, path=self.full_path(), provider=self.provider, header={"package": None})

    def is_group(self, config_path: str) -> bool:
        return config_path.strip("/") in ARCHITECTURE_GROUPS

    def is_config(self, config_path: str) -> bool:
        group, _, option = config_path.strip("/").removesuffix(".yaml").rpartition("/")
        return option in group_axes(group)[0].options() if group in ARCHITECTURE_GROUPS else option == DEFAULTS

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        path = config_path.strip("/")
        names = group_axes(path)[0].options() if path in ARCHITECTURE_GROUPS else [DEFAULTS, *ARCHITECTURE_GROUPS]
        found: list[str] = []
        for name in names:
            self._list_add_result(found, f"{path}/{name}".strip("/"), name, results_filter)
        return sorted(set(found))


class ArchitectureSearchPath(SearchPathPlugin):
    """``ablate://`` after the primary config folder, when that folder is the ``conf/`` of an ablate checkout."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        folders = [Path(e.path.removeprefix("file://")) for e in search_path.get_path() if e.provider == "main"]
        if any((f / "train.yaml").is_file() and (f.parent / "src" / "ablate").is_dir() for f in folders):
            search_path.append("ablate", "ablate://axes")
