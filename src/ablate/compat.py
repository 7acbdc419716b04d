"""Every private Hydra or Lightning name this package relies on, in one place (issue 19).

A library may rename a private name in any release: kept here, each with why no public API does
the job, an upgrade breaks one module and ``tests/test_compat.py`` names the name that moved.
Private names used elsewhere, as overrides must sit on their subclass (the test checks them too):
``StepsRichProgressBar._get_train_description`` (``callbacks/progress.py``) and
``CSVLogger._experiment`` (``AppendingCSVLogger.experiment``, ``tracking/csv_logger.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from typing import Any

import fsspec.utils

__all__ = [  # and BasicSweeper (__getattr__)
    "flatten_params",
    "hydra_args_parser",
    "is_local_path",
    "sweeper_params_overrides",
]


def __getattr__(name: str) -> Any:
    """``BasicSweeper``, Hydra's grid sweeper: no public import path (``hydra.plugins`` has only the
    abstract Sweeper); our sweepers extend its grid expansion, batching and job numbering rather than
    copy them. Looked up when a sweeper module asks for it, not when this module is imported: Hydra's
    plugin scan executes ``basic_sweeper.py`` again, and a subclass of the class from before that
    fails in its ``super(BasicSweeper, self)`` (training code imports this module long before)."""
    if name == "BasicSweeper":
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

        return BasicSweeper
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def hydra_args_parser() -> Any:
    """The ``argparse`` parser of a ``@hydra.main`` app's command line, private in Hydra 1.3: the
    command-line check reads a command exactly as Hydra will, before Hydra runs."""
    from hydra._internal.utils import get_args_parser

    return get_args_parser()


def sweeper_params_overrides(sweeper: Any) -> list[str]:
    """The overrides of ``hydra.sweeper.params`` as command-line strings (``key=a,b``): what
    Hydra's basic sweeper prepends to the command line's. Private in Hydra 1.3 (``_parse_config``)."""
    return list(sweeper._parse_config())


def is_local_path(path: Any) -> bool:
    """Whether ``path`` is on the local file system (no ``s3://``, ``gs://``, ... protocol)."""
    return fsspec.utils.get_protocol(str(path)) == "file"


def flatten_params(params: Mapping[Any, Any], separator: str = "/", prefix: str = "") -> dict[str, Any]:
    """Nested mappings (dataclasses, lists of mappings by index) as one level, as Lightning's private
    ``_flatten_dict``: ``{"a": {"b": 1}, "l": [{"c": 2}]}`` -> ``{"a/b": 1, "l/0/c": 2}``."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{separator}{key}" if prefix else str(key)
        if is_dataclass(value) and not isinstance(value, type):
            value = asdict(value)
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, separator, name))
        elif isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
            flat.update(flatten_params({str(i): item for i, item in enumerate(value)}, separator, name))
        else:
            flat[name] = value
    return flat
