"""The project's data modules by name: the only classes a data config stored in a checkpoint may name.

Passed to ``hydra.utils.instantiate``, a stored config would call whatever a crafted file names
(``pathlib.Path.write_text``, nested ``_target_`` anywhere) the moment ``eval.py`` opens it. Instead
the stored ``_target_`` is looked up among ablate's own data modules and the class is built with the
stored values as plain keyword arguments (:func:`build_data_module`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, cast

from ablate.checkpoints.stored_config import StoredConfigError, instantiation_keys

__all__ = ["DATA_MODULES", "StoredConfigError", "build_data_module", "data_module_class", "instantiation_keys"]

# Hydra's ``_target_`` (module.Class) of each data module of conf/data/*.yaml
DATA_MODULES = (
    "ablate.data.lm_data.TinyShakespeare",
    "ablate.data.lm_data.WikiText2",
    "ablate.data.lm_data.WikiText103",
    "ablate.data.lm_data.TextFiles",
    "ablate.data.translation_data.ParallelCorpus",
    "ablate.data.translation_data.ParallelFiles",
)


def data_module_class(target: Any, source: str) -> type:
    """The data module class registered under ``target``; anything else is refused, naming ``source``."""
    if not isinstance(target, str) or target not in DATA_MODULES:
        raise StoredConfigError(
            f"{source}: its data config names the data module {target!r}, which is not one of ablate's "
            f"({', '.join(sorted(DATA_MODULES))}): refused (nothing a file names is imported or called)"
        )
    module, _, name = target.rpartition(".")
    return cast(type, getattr(importlib.import_module(module), name))


def build_data_module(config: Mapping[str, Any], source: str, **overrides: Any) -> Any:
    """The data module a stored data config describes, its other keys (with ``overrides``, e.g. the
    current ``data_dir``) as keyword arguments; a key the class does not take, or any nested
    instantiation key, is refused naming ``source``."""
    from ablate.config.types import target_keys

    values = {**config, **overrides}
    cls = data_module_class(values.pop("_target_", None), source)
    nested = instantiation_keys(values)
    if nested:
        raise StoredConfigError(
            f"{source}: its data config holds {nested}, a Hydra instantiation key: refused (a stored config "
            "holds values only; nothing in it is called)"
        )
    accepted = target_keys(cls)
    unknown = sorted(k for k in values if accepted is not None and k not in accepted)
    if unknown:
        raise StoredConfigError(
            f"{source}: data.{unknown[0]} is not a key of {cls.__name__}; valid keys: {', '.join(sorted(accepted or ()))}"
        )
    return cls(**values)
