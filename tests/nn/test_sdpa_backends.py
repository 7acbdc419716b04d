"""A masked SDPA call never lets PyTorch pick cuDNN's attention (issue 39 item 5): cuDNN builds an
execution graph per new shape (a few hundred ms each on a GPU), and translation's length-bucketed
batches make nearly every first-epoch batch a new shape. The CPU half: the backend flags at the
moment of the call (on the CPU the kernels are the same either way: cuDNN attention is a GPU kernel)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ablate.nn import attention


@pytest.fixture
def flags_at_call(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    seen: list[bool] = []
    real = F.scaled_dot_product_attention

    def recording(*args, **kwargs):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    return seen


def qkv(b: int = 2, h: int = 2, t: int = 5, d: int = 4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(b, h, t, d, generator=g) for _ in range(3))  # type: ignore[return-value]


def test_padding_and_bias_masks_exclude_cudnn_attention(flags_at_call: list[bool]) -> None:
    q, k, v = qkv()
    padding = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    padding[1, ..., 3:] = False  # the second sentence is 3 tokens long
    masked = attention.sdpa_attention(q, k, v, padding, None, 0.0, causal=False)
    biased = attention.sdpa_attention(q, k, v, None, torch.randn(1, 2, 5, 5), 0.0, causal=True)
    assert flags_at_call == [False, False]
    assert torch.backends.cuda.cudnn_sdp_enabled()  # the setting is back as it was after the call
    expected, _ = attention.math_attention(q, k, v, padding, None, 0.0)  # the same function
    torch.testing.assert_close(masked, expected)
    assert biased.shape == q.shape


def test_the_causal_lm_call_is_left_to_pytorch(flags_at_call: list[bool]) -> None:
    q, k, v = qkv()
    attention.sdpa_attention(q, k, v, None, None, 0.0, causal=True)  # a fixed shape: every kernel may run
    assert flags_at_call == [True]
