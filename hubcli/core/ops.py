"""Small tensor operations the compact encoder and the adapters need: the activation table,
and a dropout tuned for the CPU.

`dropout` exists because `torch.nn.functional.dropout` draws one Bernoulli sample per element
through the CPU generator, which cost ~9% of an adapter training step on MiniLM (13 dropouts
per step on (32, L, 384) tensors). Drawing 64 random bits at once and reading them as four
16-bit uniforms is about three times faster, with the keep probability exact to 2^-16.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

_SPAN = 1 << 16

# The one activation table: adapters' `non_linearity` (the schema's words, format.vocab's
# ACTIVATIONS) and the compact BERT's `hidden_act`. Under these names transformers' ACT2FN
# computes the same functions (GELU is the exact, erf-based one), so either reads it.
ACTIVATION_FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu, "relu": F.relu, "tanh": torch.tanh, "silu": F.silu}


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> torch.Tensor:
    """A boolean mask that is True with probability 1 - p (to within 2^-16) per element."""
    n = math.prod(shape)
    words = torch.randint(-(1 << 63), (1 << 63) - 1, ((n + 3) // 4,), dtype=torch.int64,
                          device=device)
    halves = words.view(torch.int16)[:n]
    # int16 is uniform on [-2^15, 2^15): keep when it lands above the lowest p * 2^16 values
    return (halves >= round(p * _SPAN) - (_SPAN >> 1)).view(shape)


class _Dropout(torch.autograd.Function):
    # one scaled float mask, saved for backward: a plain `x * bool_mask * scale` would convert
    # the mask to float twice per step and keep the bool around too (2x slower, fwd + bwd)
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        scale = keep_mask(x.shape, p, x.device).to(x.dtype).mul_(1.0 / (1.0 - p))
        ctx.save_for_backward(scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (scale,) = ctx.saved_tensors
        return grad * scale, None


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout, as `F.dropout`, drawing its mask with `keep_mask`."""
    if not training or p <= 0.0:
        return x
    if p >= 1.0:
        return torch.zeros_like(x)
    return _Dropout.apply(x, p)
