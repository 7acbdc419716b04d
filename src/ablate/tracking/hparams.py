"""What the loggers record as a run's hyper-parameters: the scalar settings TensorBoard's HPARAMS
tab filters on, and, of what Lightning hands a logger at the start of fit, only what the run
config does not already hold.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ablate.nn.axes import ARCHITECTURE_GROUPS

# The run-config groups whose scalar values are a run's hyper-parameters (TensorBoard's HPARAMS tab)
HPARAM_GROUPS = ("task", "model", *ARCHITECTURE_GROUPS, "optim", "data")
_NOT_HPARAMS = ("_target_", "data_dir", "cache_dir")


def scalar_hparams(config: Mapping[str, Any]) -> dict[str, Any]:
    """The run's hyper-parameters as flat ``group.key -> scalar`` (``optim.lr``, ``model.d_model``, ...)
    plus ``seed`` and ``params``: what TensorBoard's HPARAMS tab can filter and sort on."""
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


# Constructor arguments of the task modules (ablate.tasks): Lightning logs them as hyper-parameters
# at the start of fit, but each is already in the run config (``spec`` is the resolved model config
# again, ``optim``/``data`` the same nodes, ``compile`` is ``model.compile``).
_TASK_HPARAMS = frozenset({"spec", "optim", "data", "decode", "task", "compile"})


def new_hparams(params: Any, config_keys: Collection[str]) -> dict[str, Any]:
    """Hyper-parameters Lightning hands a logger, less what the run config already holds."""
    params = dict(vars(params) if not isinstance(params, Mapping) else params)
    return {k: v for k, v in params.items() if k not in _TASK_HPARAMS and k not in config_keys}
