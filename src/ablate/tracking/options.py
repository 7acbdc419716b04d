"""The ``logger.*`` config nodes as dataclasses (``conf/logger/<name>.yaml``; :mod:`ablate.run.config`
reads their keys and types), ``tags``, and the check that a selected logger is installed."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from omegaconf import DictConfig, ListConfig, OmegaConf

from ablate.config.store import store_section
from ablate.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

PIP_EXTRA = "pip install -c requirements/constraints.txt -e '.[{extra}]'"


@dataclass(frozen=True)
class WandbOptions:
    """The ``logger.wandb`` config node, with defaults for missing keys."""

    enabled: bool = False
    project: str = "ablate"
    entity: str | None = None
    group: str | None = None
    mode: str | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_logger(cls, logger: Any) -> WandbOptions:
        """Read ``logger.wandb`` from the ``logger`` node alone (interpolations resolve in its config)."""
        return cls(**_known_options(logger.get("wandb") if logger is not None else None, cls))


@dataclass(frozen=True)
class TensorBoardOptions:
    """The ``logger.tensorboard`` config node (``conf/logger/tensorboard.yaml``); absent means off."""

    enabled: bool = False


@dataclass(frozen=True)
class MLflowOptions:
    """The ``logger.mlflow`` config node; absent means off. ``tracking_uri`` None:
    ``$MLFLOW_TRACKING_URI``, else ``file:<output_dir>/../mlruns``."""

    enabled: bool = False
    experiment_name: str = "ablate"
    tracking_uri: str | None = None


def _known_options(node: Any, options: type[DataclassInstance]) -> dict[str, Any]:
    if node is None:
        return {}
    if not isinstance(node, DictConfig):
        node = OmegaConf.create(node)
    values = cast(dict[str, Any], OmegaConf.to_container(node, resolve=True))  # a mapping node
    known = {k: v for k, v in values.items() if k in options.__dataclass_fields__}
    if "tags" in known:
        known["tags"] = tuple(as_tags(known["tags"]))
    return known


class LoggerUnavailable(ConfigError):
    """A logger was selected whose package is not installed; the message names the pip command."""


# logger -> (modules that provide it, the pyproject extra that installs it)
_LOGGER_PACKAGES = {"tensorboard": (("tensorboard", "tensorboardX"), "tensorboard"), "mlflow": (("mlflow",), "mlflow")}


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def require_installed(name: str, enabled: bool) -> None:
    """A selected (``enabled``) logger's package is installed, else :class:`LoggerUnavailable`
    naming the ``pip install`` command of the missing extra."""
    if not enabled or name not in _LOGGER_PACKAGES:
        return
    modules, extra = _LOGGER_PACKAGES[name]
    if not any(_installed(m) for m in modules):
        raise LoggerUnavailable(
            f"logger {name} is selected (logger.{name}.enabled=true) but the {modules[0]} package is not "
            f"installed. Install it with:\n  {PIP_EXTRA.format(extra=extra)}\n"
            f"(from the repository root), or drop {name} from the logger list"
        )


LOGGER_OPTIONS: dict[str, type[WandbOptions] | type[TensorBoardOptions] | type[MLflowOptions]] = {
    "wandb": WandbOptions,
    "tensorboard": TensorBoardOptions,
    "mlflow": MLflowOptions,
}
"""The ``logger.<name>`` nodes and their options dataclasses (``csv`` has none: always on)."""
for _name, _options in LOGGER_OPTIONS.items():  # schema/logger_<name>: what conf/logger/*.yaml extend
    store_section(_options, f"logger_{_name}")


def configured(logger: Any) -> dict[str, Any]:
    """The options of every ``logger.<name>`` that has options, each selected logger's package required."""
    values = cast(
        dict[str, Any],
        OmegaConf.to_container(logger, resolve=True) if isinstance(logger, DictConfig) else dict(logger or {}),
    )
    return {name: logger_options(name, node or {}) for name, node in values.items() if name in LOGGER_OPTIONS}


def logger_options(name: str, values: dict[str, Any]) -> Any:
    """The options of ``logger.<name>`` from its checked values, its package required when selected."""
    known = _known_options(values, LOGGER_OPTIONS[name])
    options = LOGGER_OPTIONS[name](**known)
    require_installed(name, options.enabled)
    return options


def as_tags(value: Any) -> list[str]:
    """A ``tags`` value (a list; a single string is one tag; None none) as a list of strings."""
    if value is None:
        return []
    if isinstance(value, ListConfig):
        value = OmegaConf.to_container(value, resolve=True)
    if isinstance(value, str):
        return [value] if value else []
    return [str(v) for v in value]
