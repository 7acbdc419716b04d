"""Weight initialisation schemes (the ``init`` option).

Each scheme is a function ``(model, std) -> None`` applied once after the model is built. They
find the parts they treat specially by type and name, not by position:

* residual output projections: ``out_proj`` of attention and ``fc_out`` of the FFN;
* embeddings: every ``nn.Embedding`` and the learned position table;
* DeepNorm sub-layers: children of a :class:`DeepNormResidual`, which carries its ``beta``.

Norm layers keep their defaults (gain 1, bias 0) in every scheme.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn

from ablate.nn.attention import CrossAttention, SelfAttention
from ablate.nn.block import DeepNormResidual
from ablate.nn.embedding import TokenEmbedding
from ablate.nn.positional import Learned

RESIDUAL_OUTPUTS = ("out_proj", "fc_out")


def linears(model: nn.Module) -> Iterator[tuple[str, nn.Linear]]:
    return ((n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear))


def embedding_weights(model: nn.Module) -> Iterator[Tensor]:
    for module in model.modules():
        if isinstance(module, (nn.Embedding, TokenEmbedding, Learned)):
            yield module.weight


def residual_projections(model: nn.Module) -> list[nn.Linear]:
    return [m for n, m in linears(model) if n.rsplit(".", 1)[-1] in RESIDUAL_OUTPUTS]


def xavier_(lin: nn.Linear, gain: float = 1.0, uniform: bool = True) -> None:
    """Xavier init of a linear layer. A fused layer (``fused_sizes`` set: Q/K/V, or the gate and
    value of a GLU) holds several matrices stacked by rows; each gets its own fan-in/fan-out, as
    it would if it were a separate layer."""
    fill = nn.init.xavier_uniform_ if uniform else nn.init.xavier_normal_
    with torch.no_grad():
        for rows in lin.weight.split(list(getattr(lin, "fused_sizes", [lin.out_features])), dim=0):
            rows.copy_(fill(torch.empty_like(rows), gain=gain))


def _zero_biases(model: nn.Module) -> None:
    for _, lin in linears(model):
        if lin.bias is not None:
            nn.init.zeros_(lin.bias)


def init_pytorch(model: nn.Module, std: float) -> None:
    """PyTorch's module defaults (Kaiming-uniform linears, N(0, 1) embeddings), untouched."""


def init_xavier(model: nn.Module, std: float) -> None:
    """Xavier-uniform linears, zero biases (Glorot & Bengio 2010), embeddings N(0, d^-1/2) as
    fairseq's Transformer does (Vaswani et al. 2017 scale embeddings by sqrt(d) to match)."""
    for _, lin in linears(model):
        xavier_(lin)
    _zero_biases(model)
    for weight in embedding_weights(model):
        nn.init.normal_(weight, std=weight.size(-1) ** -0.5)


def init_gpt2(model: nn.Module, std: float) -> None:
    """GPT-2 (Radford et al. 2019, Sec. 2.3): N(0, 0.02) everywhere, zero biases, and residual
    output projections scaled by 1/sqrt(number of residual branches) = 1/sqrt(2N) for N layers."""
    for _, lin in linears(model):
        nn.init.normal_(lin.weight, std=std)
    _zero_biases(model)
    for weight in embedding_weights(model):
        nn.init.normal_(weight, std=std)
    projections = residual_projections(model)
    for lin in projections:
        nn.init.normal_(lin.weight, std=std / math.sqrt(len(projections)))


def init_small(model: nn.Module, std: float) -> None:
    """SmallInit (Nguyen & Salazar 2019, "Transformers without Tears", Sec. 2.3):
    N(0, sqrt(2 / (5 d))) for every matrix and embedding, zero biases. d is d_model (the
    embedding width) for every matrix, the FFN's output one included, as in GPT-NeoX."""
    embeddings = list(embedding_weights(model))
    d = embeddings[0].size(-1) if embeddings else None
    for _, lin in linears(model):
        nn.init.normal_(lin.weight, std=math.sqrt(2 / (5 * (d or lin.in_features))))
    _zero_biases(model)
    for weight in embeddings:
        nn.init.normal_(weight, std=math.sqrt(2 / (5 * weight.size(-1))))


def _scale_value_and_output(sublayer: nn.Module, beta: float) -> None:
    """DeepNet gain beta on W_v, W_o (attention) and both FFN matrices; W_q, W_k keep gain 1."""
    if isinstance(sublayer, SelfAttention):
        d = sublayer.n_heads * sublayer.head_dim
        kv = sublayer.n_kv_heads * sublayer.head_dim
        with torch.no_grad():
            v = torch.empty_like(sublayer.qkv.weight[d + kv :])
            sublayer.qkv.weight[d + kv :] = nn.init.xavier_normal_(v, gain=beta)
        nn.init.xavier_normal_(sublayer.out_proj.weight, gain=beta)
    elif isinstance(sublayer, CrossAttention):
        kv = sublayer.n_kv_heads * sublayer.head_dim
        with torch.no_grad():
            v = torch.empty_like(sublayer.kv.weight[kv:])
            sublayer.kv.weight[kv:] = nn.init.xavier_normal_(v, gain=beta)
        nn.init.xavier_normal_(sublayer.out_proj.weight, gain=beta)
    else:  # FFN
        for _, lin in linears(sublayer):
            xavier_(lin, gain=beta, uniform=False)


def init_deepnet(model: nn.Module, std: float) -> None:
    """DeepNet (Wang et al. 2022, Sec. 3, "DeepNorm" pseudo-code): Xavier-normal everywhere, then
    gain beta on the value, output and FFN matrices of every DeepNorm sub-layer. Q and K are
    computed by one fused matrix here, so their rows keep gain 1 while the value rows get beta."""
    for _, lin in linears(model):
        xavier_(lin, uniform=False)
    _zero_biases(model)
    for weight in embedding_weights(model):
        nn.init.normal_(weight, std=weight.size(-1) ** -0.5)
    for module in model.modules():
        if isinstance(module, DeepNormResidual):
            _scale_value_and_output(module.sublayer, module.beta)


INITS: dict[str, Callable[[nn.Module, float], None]] = {
    "pytorch": init_pytorch,
    "xavier": init_xavier,
    "gpt2": init_gpt2,
    "small": init_small,
    "deepnet": init_deepnet,
}


def initialise(model: nn.Module, scheme: str, std: float = 0.02) -> None:
    if scheme not in INITS:
        raise ValueError(f"unknown init={scheme!r}; valid options: {', '.join(INITS)}")
    INITS[scheme](model, std)
