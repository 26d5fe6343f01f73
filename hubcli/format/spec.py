"""The exact tensors an adapter file holds, derived from its manifest alone.

Torch-free on purpose: `hub bundle` and the registry check a bundle's safetensors header
(names, shapes, dtypes) against this without loading any weights.

Tensor names in `adapter.safetensors` (all float32). Houlsby (`architecture.type` "houlsby"):
    adapters.{layer}.{placement}.down.weight   [m, d]   down-projection
    adapters.{layer}.{placement}.down.bias     [m]
    adapters.{layer}.{placement}.up.weight     [d, m]   up-projection
    adapters.{layer}.{placement}.up.bias       [d]
    layernorm.layers.{layer}.{placement}.weight_delta  [d]   gamma = gamma_base + delta
    layernorm.layers.{layer}.{placement}.bias_delta    [d]   beta  = beta_base + delta
    layernorm.{extra}.weight_delta / .bias_delta       [e]   extra = embeddings; e is the
                                                             embedding width (= d but in ELECTRA)
    (LayerNorm deltas per `architecture.layernorm`: every layer's and the extras for
    "delta", only those of the adapter's `layers` for "own-layers", none for "frozen")
    head.*                                             see HEAD_TENSORS
placement is `attention_output` or `ffn_output`.
LoRA (`architecture.type` "lora"; no LayerNorm deltas):
    adapters.{layer}.{placement}.A.weight      [r, d]   A, random init
    adapters.{layer}.{placement}.B.weight      [d, r]   B, zero init; update (alpha / r) B A x
    head.*
placement is `query` or `value` (the attention projections, d -> d).
Fusion (`architecture.type` "fusion", in `fusion.safetensors`; components in their own files):
    fusion.{layer}.{placement}.query.weight    [d, d]   scores (Q y) . (K o_k)
    fusion.{layer}.{placement}.query.bias      [d]
    fusion.{layer}.{placement}.key.weight      [d, d]   no bias (softmax ignores it)
    fusion.{layer}.{placement}.value.weight    [d, d]   identity at the start
    fusion.{layer}.{placement}.value.bias      [d]
    head.*
"""

from __future__ import annotations

from typing import Any

from hubcli.format.vocab import HEAD_TYPES, LAYERNORM_MODES, PLACEMENTS

Shape = tuple[int, ...]

EXTRA_LAYERNORMS = ("embeddings",)


def head_tensors(head_type: str, d: int, num_outputs: int) -> dict[str, Shape]:
    """Tensor shapes of a task head on hidden size `d`.

    Raises:
        ValueError: unknown head type.
    """
    if head_type in ("sequence_classification", "regression"):
        return {"head.dense.weight": (d, d), "head.dense.bias": (d,),
                "head.out.weight": (num_outputs, d), "head.out.bias": (num_outputs,)}
    if head_type in ("token_classification", "question_answering"):
        return {"head.out.weight": (num_outputs, d), "head.out.bias": (num_outputs,)}
    raise ValueError(f"unknown head type {head_type!r}; choose from {', '.join(HEAD_TYPES)}")


def adapter_tensors(d: int, m: int, layers: list[int], placement: list[str]) -> dict[str, Shape]:
    out: dict[str, Shape] = {}
    for i in layers:
        for p in placement:
            pre = f"adapters.{i}.{p}"
            out.update({f"{pre}.down.weight": (m, d), f"{pre}.down.bias": (m,),
                        f"{pre}.up.weight": (d, m), f"{pre}.up.bias": (d,)})
    return out


def lora_tensors(d: int, r: int, layers: list[int], placement: list[str]) -> dict[str, Shape]:
    """LoRA on d x d projections: 2 r d parameters per placement and layer."""
    out: dict[str, Shape] = {}
    for i in layers:
        for p in placement:
            out.update({f"adapters.{i}.{p}.A.weight": (r, d), f"adapters.{i}.{p}.B.weight": (d, r)})
    return out


def fusion_tensors(d: int, layers: list[int], placement: list[str]) -> dict[str, Shape]:
    """AdapterFusion at every (layer, placement): query, key and value projections, d -> d."""
    out: dict[str, Shape] = {}
    for i in layers:
        for p in placement:
            pre = f"fusion.{i}.{p}"
            out.update({f"{pre}.query.weight": (d, d), f"{pre}.query.bias": (d,),
                        f"{pre}.key.weight": (d, d), f"{pre}.value.weight": (d, d),
                        f"{pre}.value.bias": (d,)})
    return out


def layernorm_sites(mode: str, num_layers: int, layers: list[int]) -> list[str]:
    """The LayerNorms an adapter has deltas for, by `architecture.layernorm` (`mode`): every
    one ("delta"), those of its own `layers` ("own-layers"), none ("frozen").

    Raises:
        ValueError: an unknown mode.
    """
    if mode not in LAYERNORM_MODES:
        raise ValueError(f"unknown layernorm {mode!r}; choose from {', '.join(LAYERNORM_MODES)}")
    if mode == "frozen":
        return []
    own = range(num_layers) if mode == "delta" else sorted(layers)
    sites = [f"layers.{i}.{p}" for i in own for p in PLACEMENTS]
    return [*sites, *EXTRA_LAYERNORMS] if mode == "delta" else sites


def layernorm_tensors(d: int, sites: list[str], embedding_size: int | None = None
                      ) -> dict[str, Shape]:
    """LayerNorm deltas at `sites`; the embeddings' LayerNorm has the embedding width
    (ELECTRA: not d)."""
    out: dict[str, Shape] = {}
    for name in sites:
        size = (embedding_size or d) if name in EXTRA_LAYERNORMS else d
        out[f"layernorm.{name}.weight_delta"] = (size,)
        out[f"layernorm.{name}.bias_delta"] = (size,)
    return out


def expected_tensors(manifest: dict[str, Any]) -> dict[str, Shape]:
    """All tensor names and shapes `adapter.safetensors` must hold for this manifest.

    Raises:
        KeyError: the manifest lacks a field the layout depends on.
        ValueError: unknown head type or adapter method.
    """
    base, arch, head = manifest["base_model"], manifest["architecture"], manifest["head"]
    d, n_layers = int(base["hidden_size"]), int(base["num_layers"])
    layers, placement = list(arch["layers"]), list(arch["placement"])
    method = arch.get("type", "houlsby")
    if method == "houlsby":
        out = adapter_tensors(d, int(arch["bottleneck"]), layers, placement)
    elif method == "lora":
        out = lora_tensors(d, int(arch["rank"]), layers, placement)
    elif method == "fusion":
        out = fusion_tensors(d, layers, placement)
    else:
        raise ValueError(f"unknown adapter method {method!r}; choose from houlsby, lora, fusion")
    out.update(layernorm_tensors(d, layernorm_sites(arch.get("layernorm", "delta"), n_layers,
                                                    layers), base.get("embedding_size")))
    out.update(head_tensors(head["type"], d, int(head["num_outputs"])))
    return out


def adapter_param_count(d: int, m: int) -> int:
    """Parameters of one bottleneck adapter: 2md + d + m."""
    return 2 * m * d + d + m


TENSOR_DTYPE = "F32"
