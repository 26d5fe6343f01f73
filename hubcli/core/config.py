"""What an adapter is, per method: its shape, placement and initialisation.

Each method is one frozen dataclass with the same small interface (`method`, `placement`,
`layernorm`, `resolved_layers`, `to_manifest`, `from_manifest`); `config_from_manifest`
picks the class by the manifest's `architecture.type`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Union

from hubcli.format.vocab import ACTIVATIONS, HOULSBY_TAPS, LAYERNORM_MODES, METHOD_PLACEMENTS

PLACEMENTS = METHOD_PLACEMENTS["houlsby"]


def _resolved_layers(layers: tuple[int, ...] | None, num_layers: int) -> list[int]:
    """The layer indices that get adapters, checked against the model's depth."""
    if layers is None:
        return list(range(num_layers))
    bad = [i for i in layers if not 0 <= i < num_layers]
    if bad:
        raise ValueError(f"layer {bad[0]} does not exist; the model has layers 0..{num_layers - 1}")
    return sorted(set(layers))


def _check_placement(method: str, placement: tuple[str, ...]) -> None:
    allowed = METHOD_PLACEMENTS[method]
    bad = [p for p in placement if p not in allowed]
    if bad:
        raise ValueError(f"unknown placement {bad[0]!r}; choose from {', '.join(allowed)}")


@dataclass(frozen=True)
class HoulsbyConfig:
    """Configuration of a Houlsby et al. (2019) bottleneck adapter set."""

    method = "houlsby"

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
    layernorm: str = field(default="delta", metadata={
        "help": "LayerNorms trained as per-adapter deltas on the frozen base's: delta, every "
                "one (Houlsby); own-layers, those of the adapter's own layers, so the layers "
                "below stay the base's (AdapterDrop: a Parallel runs them once); frozen, none"})
    reads: str = field(default="output", metadata={
        "help": "what the bottleneck f reads: output (h, the sublayer's output projection: "
                "Houlsby), normed (LN(h + x), past the sublayer's residual add and LayerNorm: "
                "Pfeiffer et al. 2020), input (x, the sublayer's input: a parallel adapter, He "
                "et al. 2021) or sum (h + x); the sublayer then computes LN(skip + f(reads) + x)"})
    skip: str = field(default="output", metadata={
        "help": "what the adapter's own skip connection adds back to f(reads): output (h), "
                "normed (LN(h + x)), input (x) or sum (h + x)"})

    def __post_init__(self) -> None:
        for name in ("reads", "skip"):
            if getattr(self, name) not in HOULSBY_TAPS:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; "
                                 f"choose from {', '.join(HOULSBY_TAPS)}")
        if self.layernorm not in LAYERNORM_MODES:
            raise ValueError(f"unknown layernorm {self.layernorm!r}; "
                             f"choose from {', '.join(LAYERNORM_MODES)}")
        if self.bottleneck < 1:
            raise ValueError(f"bottleneck must be >= 1, got {self.bottleneck}")
        if self.init_scale < 0:
            raise ValueError(f"init_scale must be >= 0, got {self.init_scale}")
        _check_placement(self.method, self.placement)
        if self.non_linearity not in ACTIVATIONS:
            raise ValueError(f"unknown non-linearity {self.non_linearity!r}; "
                             f"choose from {', '.join(ACTIVATIONS)}")

    def resolved_layers(self, num_layers: int) -> list[int]:
        """The layer indices that get adapters, checked against the model's depth."""
        return _resolved_layers(self.layers, num_layers)

    def to_manifest(self, num_layers: int) -> dict[str, Any]:
        d = asdict(self)
        d["layers"] = self.resolved_layers(num_layers)
        d["placement"] = list(self.placement)
        d["type"] = "houlsby"
        for name in ("reads", "skip"):  # written when not Houlsby's: older readers lack them
            if d[name] == "output":
                del d[name]
        return d

    @property
    def needs_sublayer(self) -> bool:
        """False for Houlsby's own form, LN(h + f(h) + x), where the adapter needs h only;
        True where it reads the sublayer's input x or its LayerNorm too."""
        return not self.reads == self.skip == "output"

    @classmethod
    def from_manifest(cls, arch: dict[str, Any]) -> HoulsbyConfig:
        return cls(
            bottleneck=int(arch["bottleneck"]),
            layers=tuple(arch["layers"]),
            init_scale=float(arch["init_scale"]),
            non_linearity=arch["non_linearity"],
            placement=tuple(arch["placement"]),
            layernorm=arch.get("layernorm", "delta"),
            reads=arch.get("reads", "output"),
            skip=arch.get("skip", "output"),
        )


@dataclass(frozen=True)
class LoraConfig:
    """Configuration of LoRA (Hu et al. 2021): W x + (alpha / r) B A x on chosen projections,
    A [r, d_in] random, B [d_out, r] zero, so a fresh adapter changes nothing."""

    method = "lora"
    layernorm = "frozen"  # LoRA adapts the projections only

    rank: int = field(default=8, metadata={"help": "r: rank of the update B A (2 r d parameters "
                                                   "per d x d projection)"})
    alpha: float = field(default=16.0, metadata={"help": "scale numerator: updates are (alpha / r) B A x"})
    layers: tuple[int, ...] | None = field(default=None, metadata={
        "help": "indices of transformer layers that get LoRA; None means all"})
    placement: tuple[str, ...] = field(default=METHOD_PLACEMENTS["lora"], metadata={
        "help": "projections that get an update (the attention query and value, as in the paper)"})

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise ValueError(f"rank must be >= 1, got {self.rank}")
        if self.alpha <= 0:
            raise ValueError(f"alpha must be > 0, got {self.alpha}")
        _check_placement(self.method, self.placement)

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def resolved_layers(self, num_layers: int) -> list[int]:
        """The layer indices that get LoRA, checked against the model's depth."""
        return _resolved_layers(self.layers, num_layers)

    def to_manifest(self, num_layers: int) -> dict[str, Any]:
        return {"type": "lora", "rank": self.rank, "alpha": self.alpha,
                "layers": self.resolved_layers(num_layers), "placement": list(self.placement),
                "layernorm": self.layernorm}

    @classmethod
    def from_manifest(cls, arch: dict[str, Any]) -> LoraConfig:
        return cls(rank=int(arch["rank"]), alpha=float(arch["alpha"]), layers=tuple(arch["layers"]),
                   placement=tuple(arch["placement"]))


AdapterConfig = Union[HoulsbyConfig, LoraConfig]
METHODS: dict[str, type] = {"houlsby": HoulsbyConfig, "lora": LoraConfig}


def config_from_manifest(arch: dict[str, Any]) -> AdapterConfig:
    """The method's config for a manifest's `architecture` (its `type` picks the method).

    Raises:
        ValueError: unknown method.
    """
    kind = arch.get("type", "houlsby")
    if kind not in METHODS:
        raise ValueError(f"unknown adapter method {kind!r}; choose from {', '.join(METHODS)}")
    return METHODS[kind].from_manifest(arch)

