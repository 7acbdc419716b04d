"""The architecture groups for ablate's own configs only (:mod:`ablate.config.store`).

Hydra asks every search-path plugin for its path before it composes; this one registers the groups
(``pos``, ``norm``, ...) and the run config's schemas in Hydra's ConfigStore only when the primary
config folder holds ``train.yaml``, so that another Hydra application with a key ``norm`` keeps it.
"""

from __future__ import annotations

from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class ArchitectureGroups(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        folders = [Path(e.path.removeprefix("file://")) for e in search_path.get_path() if e.provider == "main"]
        if any((folder / "train.yaml").is_file() for folder in folders):
            import ablate.run.config  # noqa: F401  (ablate.config.store: the groups and the schemas)
