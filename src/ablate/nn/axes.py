"""The architecture axes in one table: which config group and key choose each option, the registry
of its options, and the :class:`~ablate.nn.spec.ModelSpec` field that holds the choice.

Everything that lists the axes iterates :data:`AXES`: the validation of a spec
(:func:`ablate.config.model.validate`), the refusal of keys an option does not take
(:mod:`ablate.config.options`), ``ModelSpec.axes()`` (the flat names W&B, ``status.json`` and the
tables group runs by), the run names and W&B axis keys (:mod:`ablate.tracking.naming`), the order
of config groups in sweep directories, the config tree and the resume identity.

The key that selects an option is the group's own, as the README documents it (``pos.name``,
``norm.placement``, ``attn.impl``): renaming them would break every command line and config
that users have. The table says which it is, so no code special-cases a group for it.

Light on purpose (the registries are imported when asked for): the naming of runs and the
resolvers of the configs read the table without importing torch.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass


def _positional() -> Collection[str]:
    from ablate.nn.positional import POSITIONAL

    return POSITIONAL


def _placements() -> Collection[str]:
    from ablate.nn.block import PLACEMENTS

    return PLACEMENTS


def _norm_layers() -> Collection[str]:
    from ablate.nn.norms import NORM_LAYERS

    return NORM_LAYERS


def _activations() -> Collection[str]:
    from ablate.nn.ffn import activation_names

    return activation_names()


def _inits() -> Collection[str]:
    from ablate.nn.init import INITS

    return INITS


def _attention_kernels() -> Collection[str]:
    from ablate.nn.attention import ATTENTION_KERNELS

    return ATTENTION_KERNELS


@dataclass(frozen=True)
class Axis:
    """One architecture choice: ``group`` (the config group, ``conf/<group>/``), ``selector``
    (the key of the group that names the option), ``spec_field`` (the ``ModelSpec`` field, also
    the axis' flat name in ``status.json`` and W&B), ``registry`` (its options)."""

    group: str
    selector: str
    spec_field: str
    registry: Callable[[], Collection[str]]

    @property
    def key(self) -> str:
        """The dotted config key: ``norm.layer``."""
        return f"{self.group}.{self.selector}"

    @property
    def label(self) -> str:
        """How messages name it: the group for its first axis (``pos``, ``attn``), the dotted key
        for a second one (``norm.layer``)."""
        first = next(a for a in AXES if a.group == self.group)
        return self.group if first is self else self.key

    def options(self) -> list[str]:
        return list(self.registry())


AXES = (
    Axis("pos", "name", "pos", _positional),
    Axis("norm", "placement", "norm", _placements),
    Axis("norm", "layer", "norm_layer", _norm_layers),
    Axis("act", "name", "act", _activations),
    Axis("init", "name", "init", _inits),
    Axis("attn", "impl", "attn", _attention_kernels),
)

ARCHITECTURE_GROUPS = tuple(dict.fromkeys(axis.group for axis in AXES))
"""The config groups of the architecture, in table order: pos, norm, act, init, attn."""
