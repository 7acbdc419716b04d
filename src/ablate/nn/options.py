"""The typed config of every option of every architecture axis, declared once, without torch.

An option is a class or factory of :mod:`ablate.nn` (``Rotary`` in :mod:`ablate.nn.positional`,
...; the axes: :data:`ablate.nn.axes.AXES`). Its config here is a frozen dataclass of its keys with
their types and defaults, registered under its name with the import path of what builds it, as
fairseq registers a model with its dataclass (``register_model(name, dataclass=...)``), but without
importing the option: a command line is composed (each config is an option of its Hydra config
group, :mod:`ablate.config.store`) and checked before torch is imported (:mod:`ablate.cli`). An
option without keys is its name and its target only. The option itself takes these keys with no
defaults of its own (``tests/nn/test_options.py`` holds each config against the signature of its
class, by :mod:`inspect`, so the two cannot drift).

Like OLMo-core's config dataclasses a config is plain data until built: :meth:`OptionConfig.build`
imports the option and makes it with the model's dimensions; :meth:`OptionConfig.validate` is the
option's own check of the whole spec (raising ``ValueError`` naming the key to change), here so
that it runs before torch is imported: ``pos=rope``, an odd rotary dimension; DeepNorm and DeepNet,
one without the other. The repr names the option: ``pos[rope](base=10000.0, fraction=1.0)``.
"""

# no ``from __future__ import annotations``: the fields' types are types, as Hydra's structured configs read them
import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True, kw_only=True)
class OptionConfig:
    """Base of the typed option configs: a subclass declares an option's keys (:func:`declare` gives
    each option a class of its own, named ``axis[name]``)."""

    axis: ClassVar[str]  # the axis' name (``pos``, ``norm_layer``)
    name: ClassVar[str]  # the option's name (``rope``)
    target: ClassVar[str]  # ``module:Name`` of its class or factory in ablate.nn (``positional:Rotary``)
    constructor: ClassVar[str | None]  # the class method that builds it, when not the class itself

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as what makes it (a declared class has no importable name): a job's ranks get it so."""
        return _remade, (self.axis, self.name, self.options())

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """``key -> default``, in declaration order."""
        return {f.name: f.default for f in dataclasses.fields(cls)}

    def options(self) -> dict[str, Any]:
        """The option's keys and their values, to build it with."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @property
    def option(self) -> Any:
        """The registered class or factory (importing its module: torch)."""
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(f"ablate.nn.{module}"), name)

    def build(self, *dims: Any, **named_dims: Any) -> Any:
        """The option made with the axis' dimensions and its keys."""
        make = getattr(self.option, self.constructor) if self.constructor else self.option
        return make(*dims, **named_dims, **self.options())

    def validate(self, spec: Any) -> None:
        """Raise ``ValueError`` (naming the key to change) when the option cannot serve ``spec`` (a
        :class:`~ablate.nn.spec.ModelSpec`, which imports this module); most options serve any."""


OPTIONS: dict[str, dict[str, type[OptionConfig]]] = {}
"""``axis -> option -> its config``, in declaration order (the order messages and docs list them)."""


def declare(
    axis: str, module: str, options: Mapping[str, str | tuple[str, type[OptionConfig]]], constructor: str | None = None
) -> None:
    """Register the options of ``axis``: each ``name -> Class`` of ``ablate.nn.<module>`` (no keys)
    or ``name -> (Class, Keys)`` (its keys: a frozen dataclass of :class:`OptionConfig`)."""
    for name, entry in options.items():
        target, keys = (entry, OptionConfig) if isinstance(entry, str) else entry
        namespace = {"axis": axis, "name": name, "target": f"{module}:{target}", "constructor": constructor}
        config = type(f"{axis}[{name}]", (keys,), {**namespace, "__doc__": keys.__doc__, "__module__": __name__})
        OPTIONS.setdefault(axis, {})[name] = dataclasses.dataclass(frozen=True, kw_only=True)(config)


def _remade(axis: str, name: str, options: dict[str, Any]) -> "OptionConfig":
    return OPTIONS[axis][name](**options)


# --- the options' keys and checks ----------------------------------------------------------------


def rotary_dim(head_dim: int, fraction: float) -> int:
    """The number of rotated features per head; it must be a positive even integer."""
    rot = head_dim * fraction
    if fraction <= 0 or fraction > 1 or rot != int(rot) or int(rot) % 2:
        raise ValueError(
            f"pos=rope rotates head_dim * pos.fraction = {head_dim} * {fraction} = {rot} features per head, "
            f"which must be a positive even integer: change model.d_model / model.n_heads or pos.fraction"
        )
    return int(rot)


@dataclass(frozen=True, kw_only=True)
class SinusoidalKeys(OptionConfig):
    """Fixed sinusoidal encodings (Vaswani et al. 2017, Sec. 3.5); ``base``: the longest wavelength / 2 pi."""

    base: float = 10000.0


@dataclass(frozen=True, kw_only=True)
class RotaryKeys(OptionConfig):
    """Rotary position embedding (Su et al. 2021, RoFormer, eq. 34); ``fraction`` < 1 rotates only
    that share of each head's features (partial rotary, as in GPT-NeoX)."""

    base: float = 10000.0
    fraction: float = 1.0

    def validate(self, spec: Any) -> None:
        rotary_dim(spec.head_dim, float(self.fraction))


@dataclass(frozen=True, kw_only=True)
class DeepNormPair(OptionConfig):
    """DeepNorm's alpha and DeepNet's beta are derived together (Wang et al. 2022): one without the
    other is refused (by ``norm=deepnorm`` and by ``init=deepnet``)."""

    def validate(self, spec: Any) -> None:
        norm, init = spec.choice("norm"), spec.choice("init")
        if (norm == "deepnorm") != (init == "deepnet"):
            raise ValueError(
                f"norm={norm} with init={init}: DeepNorm's residual scale alpha is derived together with the "
                f"init gain beta (Wang et al. 2022), so use them as a pair: norm=deepnorm init=deepnet"
            )


@dataclass(frozen=True, kw_only=True)
class EpsKeys(OptionConfig):
    """A norm layer dividing by a statistic: ``eps`` keeps the division finite."""

    eps: float = 1e-5


@dataclass(frozen=True, kw_only=True)
class LayerNormKeys(OptionConfig):
    """LayerNorm (Ba et al. 2016): ``eps`` in the division, ``bias``: the learned shift."""

    eps: float = 1e-5
    bias: bool = True


@dataclass(frozen=True, kw_only=True)
class DyTKeys(OptionConfig):
    """Dynamic Tanh (Zhu et al. 2025, eq. 1): ``alpha_init``, the paper's alpha_0 at an input of unit RMS."""

    alpha_init: float = 0.5


@dataclass(frozen=True, kw_only=True)
class GatedKeys(OptionConfig):
    """A GLU variant (Shazeer 2020, eqs. 5-6): ``match_params`` shrinks the hidden width to 2/3, so the
    three matrices hold the parameters of a plain FFN's two."""

    match_params: bool = True


@dataclass(frozen=True, kw_only=True)
class Gpt2Keys(OptionConfig):
    """GPT-2's init (Radford et al. 2019, Sec. 2.3): ``std`` of every matrix and embedding."""

    std: float = 0.02


# The ``act`` options: each activation by the import path of its function (:mod:`ablate.nn.ffn`
# imports them when it builds an FFN), so that a new one is a line here and a test of its formula.
PLAIN_ACTS: dict[str, str] = {
    "relu": "torch.nn.functional.relu",  # Vaswani et al. 2017
    "gelu": "torch.nn.functional.gelu",  # Hendrycks & Gimpel 2016 (exact erf form)
    "gelu_tanh": "ablate.nn.ffn.gelu_tanh",
    "silu": "torch.nn.functional.silu",  # a.k.a. Swish with beta=1 (Ramachandran et al. 2017)
    "relu2": "ablate.nn.ffn.relu_squared",
}
# the gate nonlinearity of each GLU variant (Shazeer 2020, eqs. 5-6; GLU: Dauphin et al. 2017)
GATED_ACTS: dict[str, str] = {
    "glu": "torch.sigmoid",
    "reglu": "torch.nn.functional.relu",
    "geglu": "torch.nn.functional.gelu",
    "swiglu": "torch.nn.functional.silu",
    "bilinear": "ablate.nn.ffn.identity",
}

declare("pos", "positional", {
    "none": "NoPositionalEncoding",
    "sinusoidal": ("Sinusoidal", SinusoidalKeys),
    "learned": "Learned",
    "rope": ("Rotary", RotaryKeys),
    "alibi": "ALiBi",
})  # fmt: skip
declare("norm", "block", {
    "pre": "PreNormResidual",
    "post": "PostNormResidual",
    "sandwich": "SandwichResidual",
    "deepnorm": ("DeepNormResidual", DeepNormPair),
}, constructor="for_stack")  # fmt: skip
declare("norm_layer", "norms", {
    "layernorm": ("layer_norm", LayerNormKeys),
    "rmsnorm": ("rms_norm", EpsKeys),
    "scalenorm": ("ScaleNorm", EpsKeys),
    "dyt": ("DyT", DyTKeys),
})  # fmt: skip
declare("act", "ffn", {
    **dict.fromkeys(PLAIN_ACTS, "FeedForward"),
    **dict.fromkeys(GATED_ACTS, ("GatedFeedForward", GatedKeys)),
})  # fmt: skip
declare("init", "init", {
    "pytorch": "PytorchInit",
    "xavier": "XavierInit",
    "gpt2": ("Gpt2Init", Gpt2Keys),
    "small": "SmallInit",
    "deepnet": ("DeepNetInit", DeepNormPair),
})  # fmt: skip
declare("attn", "attention", {"math": "MathAttention", "sdpa": "SdpaAttention"})
