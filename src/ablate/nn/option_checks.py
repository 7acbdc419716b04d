"""The architecture options' own checks of a whole model spec, without torch.

An option may refuse a spec it cannot serve (``check_options(spec, **options)``, raising
``ValueError`` naming the key to change: :meth:`ablate.nn.options.OptionConfig.validate`). Its class
declares it (``check_options = staticmethod(check_rotary)``) and the function lives here, so that a
command line is checked before torch is imported: :mod:`ablate.source` reads the declaration
from the class's source and imports only this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ablate.nn.spec import ModelSpec


def rotary_dim(head_dim: int, fraction: float) -> int:
    """The number of rotated features per head; it must be a positive even integer."""
    rot = head_dim * fraction
    if fraction <= 0 or fraction > 1 or rot != int(rot) or int(rot) % 2:
        raise ValueError(
            f"pos=rope rotates head_dim * pos.fraction = {head_dim} * {fraction} = {rot} features per head, "
            f"which must be a positive even integer: change model.d_model / model.n_heads or pos.fraction"
        )
    return int(rot)


def check_rotary(spec: ModelSpec, *, fraction: float = 1.0, **_: object) -> None:
    """``pos=rope``: the rotated features per head, ``head_dim * fraction``, must be a positive even number."""
    rotary_dim(spec.head_dim, float(fraction))


def check_deepnorm_pair(spec: ModelSpec, **_: object) -> None:
    """DeepNorm's alpha and DeepNet's beta are derived together (Wang et al. 2022): one without
    the other is refused (by ``norm=deepnorm`` and by ``init=deepnet``)."""
    norm, init = spec.choice("norm"), spec.choice("init")
    if (norm == "deepnorm") != (init == "deepnet"):
        raise ValueError(
            f"norm={norm} with init={init}: DeepNorm's residual scale alpha is derived together with the "
            f"init gain beta (Wang et al. 2022), so use them as a pair: norm=deepnorm init=deepnet"
        )
