"""What the loggers record as hyper-parameters: the scalars TensorBoard's HPARAMS tab filters on, and
of what Lightning hands a logger, only what the run config does not hold."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ablate.nn.axes import ARCHITECTURE_GROUPS

# The run-config groups whose scalar values are a run's hyper-parameters (TensorBoard's HPARAMS tab)
HPARAM_GROUPS = ("task", "model", *ARCHITECTURE_GROUPS, "optim", "data")
_NOT_HPARAMS = ("_target_", "data_dir", "cache_dir")


def scalar_hparams(config: Mapping[str, Any]) -> dict[str, Any]:
    """The run's hyper-parameters as flat ``group.key -> scalar``, ``seed`` and ``params`` (TensorBoard's HPARAMS)."""
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if str(key) not in _NOT_HPARAMS:
                    walk(value, f"{prefix}.{key}")
        elif isinstance(node, (bool, int, float, str)):
            flat[prefix] = node

    for group in HPARAM_GROUPS:
        if isinstance(config.get(group), Mapping):
            walk(config[group], group)
    flat.update({key: config[key] for key in ("seed", "params") if isinstance(config.get(key), (int, float))})
    return flat


def new_hparams(params: Any, config_keys: Collection[str]) -> dict[str, Any]:
    """Hyper-parameters handed to a logger (a task's own, e.g. ``bleu_signature``), less what the run
    config already holds (the tasks keep their arguments out: ``save_hyperparameters(logger=False)``)."""
    params = dict(vars(params) if not isinstance(params, Mapping) else params)
    return {k: v for k, v in params.items() if k not in config_keys}
