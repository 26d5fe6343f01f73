"""What one Houlsby adapter is: its shape, placement and initialisation."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hubcli.format.vocab import ACTIVATIONS, PLACEMENTS


@dataclass(frozen=True)
class HoulsbyConfig:
    """Configuration of a Houlsby et al. (2019) bottleneck adapter set."""

    bottleneck: int = field(default=64, metadata={
        "help": "bottleneck size m: each adapter projects d -> m -> d (2md+d+m parameters)"})
    layers: tuple[int, ...] | None = field(default=None, metadata={
        "help": "indices of transformer layers that get adapters; None means all"})
    init_scale: float = field(default=1e-3, metadata={
        "help": "std of the truncated-normal init of adapter weights (biases start at zero), "
                "so a fresh adapter is near the identity"})
    non_linearity: str = field(default="gelu", metadata={
        "help": "activation between the down- and up-projection"})
    placement: tuple[str, ...] = field(default=PLACEMENTS, metadata={
        "help": "sublayer outputs that get an adapter, before the residual add and LayerNorm"})
    train_layernorm: bool = field(default=True, metadata={
        "help": "train every LayerNorm as a per-adapter delta on the frozen base parameters"})

    def __post_init__(self) -> None:
        if self.bottleneck < 1:
            raise ValueError(f"bottleneck must be >= 1, got {self.bottleneck}")
        if self.init_scale < 0:
            raise ValueError(f"init_scale must be >= 0, got {self.init_scale}")
        bad = [p for p in self.placement if p not in PLACEMENTS]
        if bad:
            raise ValueError(f"unknown placement {bad[0]!r}; choose from {', '.join(PLACEMENTS)}")
        if self.non_linearity not in ACTIVATIONS:
            raise ValueError(f"unknown non-linearity {self.non_linearity!r}; "
                             f"choose from {', '.join(ACTIVATIONS)}")

    def resolved_layers(self, num_layers: int) -> list[int]:
        """The layer indices that get adapters, checked against the model's depth."""
        if self.layers is None:
            return list(range(num_layers))
        bad = [i for i in self.layers if not 0 <= i < num_layers]
        if bad:
            raise ValueError(f"layer {bad[0]} does not exist; the model has layers 0..{num_layers - 1}")
        return sorted(set(self.layers))

    def to_manifest(self, num_layers: int) -> dict[str, Any]:
        d = asdict(self)
        d["layers"] = self.resolved_layers(num_layers)
        d["placement"] = list(self.placement)
        d["type"] = "houlsby"
        d["layernorm"] = "delta" if d.pop("train_layernorm") else "frozen"
        return d

    @classmethod
    def from_manifest(cls, arch: dict[str, Any]) -> HoulsbyConfig:
        return cls(
            bottleneck=int(arch["bottleneck"]),
            layers=tuple(arch["layers"]),
            init_scale=float(arch["init_scale"]),
            non_linearity=arch["non_linearity"],
            placement=tuple(arch["placement"]),
            train_layernorm=arch.get("layernorm", "delta") == "delta",
        )

