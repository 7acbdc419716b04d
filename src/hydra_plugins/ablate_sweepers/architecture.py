"""The architecture axes' options as Hydra config groups (``pos=rope``), registered in Hydra's
ConfigStore whenever Hydra builds its config search path: every ``@hydra.main`` and every
``compose``, before it composes (:func:`ablate.nn.axes.register_groups`)."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from ablate.nn.axes import register_groups


class ArchitectureGroups(SearchPathPlugin):
    """Registers the groups; the search path itself is left as it is."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        register_groups()
