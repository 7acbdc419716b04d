"""What the configuration a checkpoint stores (``hyper_parameters``) may hold: values only.

Read back, nothing in a checkpoint's configuration may be imported or called by name: no Hydra
instantiation key (``_target_``, ``_args_``, ...) but the data config's ``_target_``, which must name
one of ablate's data modules (``ablate.data.<module>.<Class>``), and no Lightning ``_instantiator``.
Cheap (no tensor read): every reader runs it (:func:`ablate.checkpoints.files.inspect_checkpoint`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ablate.errors import UserError

DATA_PACKAGE = "ablate.data."  # where every data module a stored config may name lives


class StoredConfigError(UserError, ValueError):
    """A stored config names a class or function that is not one of ablate's, or holds Hydra's
    instantiation keys where only values belong."""


def instantiation_keys(node: Any, path: str = "") -> str | None:
    """The first Hydra instantiation key (``_target_``, ``_args_``, ``_partial_``, ...) inside
    ``node``, as a dotted path, or None: a stored value must be a value, never a call."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            here = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and key.startswith("_") and key.endswith("_"):
                return here
            found = instantiation_keys(value, here)
            if found:
                return found
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            found = instantiation_keys(value, f"{path}[{i}]")
            if found:
                return found
    return None


def check_stored_config(checkpoint: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Refuse a stored configuration that names something to import or call (see the module)."""
    params = checkpoint.get("hyper_parameters")
    if params is None:
        return
    if not isinstance(params, Mapping):
        raise StoredConfigError(f"{path}: hyper_parameters is a {type(params).__name__}, not a mapping of values")
    if "_instantiator" in params:
        raise StoredConfigError(
            f"{path}: hyper_parameters._instantiator names a function Lightning would import and call: refused "
            "(our checkpoints never hold one)"
        )
    for key, value in params.items():
        if key == "data" and isinstance(value, Mapping) and "_target_" in value:
            target = value["_target_"]
            if not isinstance(target, str) or not target.startswith(DATA_PACKAGE):
                raise StoredConfigError(
                    f"{path}: hyper_parameters.data._target_={target!r} is not one of ablate's data modules "
                    f"({DATA_PACKAGE}*): refused (nothing a file names is imported or called)"
                )
            value = {k: v for k, v in value.items() if k != "_target_"}
        nested = instantiation_keys(value, str(key))
        if nested:
            raise StoredConfigError(
                f"{path}: hyper_parameters.{nested} is a Hydra instantiation key: refused (a stored config holds "
                "values only; nothing in it is imported or called)"
            )
