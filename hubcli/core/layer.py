"""Module wrappers that keep the frozen `base_layer` and a dict of named adapters.

`AdapterLinear` wraps a sublayer's output projection: y = adapter(base(x)), applied before the
sublayer's dropout, residual add and LayerNorm (Houlsby et al., Fig. 2).
`DeltaLayerNorm` wraps a LayerNorm: gamma = gamma_base + delta, beta = beta_base + delta, so
each adapter trains its own LayerNorm without touching the shared base tensors.

With no adapter active both wrappers call the base module directly, so outputs are
bit-identical to the untouched model.
"""

from __future__ import annotations


import torch
import torch.nn.functional as F
from torch import nn

_ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU, "tanh": nn.Tanh, "silu": nn.SiLU}


class BottleneckAdapter(nn.Module):
    """Adapter(x) = x + W_up(act(W_down x + b_down)) + b_up, d -> m -> d."""

    def __init__(self, d: int, m: int, *, non_linearity: str = "gelu", init_scale: float = 1e-3):
        super().__init__()
        self.down = nn.Linear(d, m)
        self.act = _ACTIVATIONS[non_linearity]()
        self.up = nn.Linear(m, d)
        self.reset_parameters(init_scale)

    def reset_parameters(self, init_scale: float) -> None:
        # Near-identity start: tiny weights and zero biases make the adapter ~x, so training
        # begins from the base model's behaviour (Houlsby et al., section 2.1).
        for lin in (self.down, self.up):
            if init_scale > 0:
                nn.init.trunc_normal_(lin.weight, std=init_scale, a=-2 * init_scale, b=2 * init_scale)
            else:
                nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.up(self.act(self.down(x)))


class AdapterLinear(nn.Module):
    """A frozen Linear followed by the active named bottleneck adapter, if any."""

    def __init__(self, base_layer: nn.Linear):
        super().__init__()
        self.base_layer = base_layer
        self.adapters = nn.ModuleDict()
        self.active: str | None = None

    def add(self, name: str, m: int, *, non_linearity: str, init_scale: float) -> BottleneckAdapter:
        w = self.base_layer.weight
        adapter = BottleneckAdapter(self.base_layer.out_features, m, non_linearity=non_linearity,
                                    init_scale=init_scale).to(device=w.device, dtype=w.dtype)
        self.adapters[name] = adapter
        return adapter

    def remove(self, name: str) -> None:
        if name in self.adapters:
            del self.adapters[name]
        if self.active == name:
            self.active = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base_layer(x)
        if self.active is None or self.active not in self.adapters:
            return y
        return self.adapters[self.active](y)


class LayerNormDelta(nn.Module):
    """Per-adapter additive deltas for one LayerNorm's weight and bias (start at zero)."""

    def __init__(self, d: int, *, device=None, dtype=None):
        super().__init__()
        self.weight_delta = nn.Parameter(torch.zeros(d, device=device, dtype=dtype))
        self.bias_delta = nn.Parameter(torch.zeros(d, device=device, dtype=dtype))


class DeltaLayerNorm(nn.Module):
    """A frozen LayerNorm whose affine parameters get the active adapter's deltas."""

    def __init__(self, base_layer: nn.LayerNorm):
        super().__init__()
        self.base_layer = base_layer
        self.deltas = nn.ModuleDict()
        self.active: str | None = None

    def add(self, name: str) -> LayerNormDelta:
        w = self.base_layer.weight
        delta = LayerNormDelta(w.shape[0], device=w.device, dtype=w.dtype)
        self.deltas[name] = delta
        return delta

    def remove(self, name: str) -> None:
        if name in self.deltas:
            del self.deltas[name]
        if self.active == name:
            self.active = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.active is None or self.active not in self.deltas:
            return self.base_layer(x)
        base, delta = self.base_layer, self.deltas[self.active]
        return F.layer_norm(x, base.normalized_shape, base.weight + delta.weight_delta,
                            base.bias + delta.bias_delta, base.eps)


