"""Where adapters go, per model type. Data, not code: supporting another BERT-shaped encoder
is one more row here.

Paths are attribute paths inside the loaded encoder (`AutoModel`'s, or the compact BERT in
`bert.py`, which keeps the same names):
- `layers`: the ModuleList of transformer layers;
- `adapters`: per placement, the Linear inside one layer that an adapter site wraps: Houlsby's
  sublayer output projections (the adapter transforms their output, before the residual add
  and LayerNorm) and LoRA's attention query and value projections (the update reads their
  input); which placements each method may use is `hubcli.format.vocab.METHOD_PLACEMENTS`,
  read from the manifest schema. A Houlsby projection's parent module is its sublayer, whose
  forward takes (hidden, input_tensor), adds input_tensor and applies the placement's
  LayerNorm: where a bottleneck in another form (`reads`/`skip`) gets x and LN from;
- `layernorms`: LayerNorms inside one layer, plus `extra_layernorms` outside the layers.
"""

from __future__ import annotations

from dataclasses import dataclass

from hubcli.errors import UnsupportedModelError


@dataclass(frozen=True)
class Targets:
    layers: str
    adapters: dict[str, str]
    layernorms: dict[str, str]
    extra_layernorms: dict[str, str]


_BERT_LIKE = Targets(
    layers="encoder.layer",
    adapters={"attention_output": "attention.output.dense", "ffn_output": "output.dense",
              "query": "attention.self.query", "value": "attention.self.value"},
    layernorms={"attention_output": "attention.output.LayerNorm", "ffn_output": "output.LayerNorm"},
    extra_layernorms={"embeddings": "embeddings.LayerNorm"},
)


TARGETS: dict[str, Targets] = {
    "bert": _BERT_LIKE,
    "roberta": _BERT_LIKE,
    "xlm-roberta": _BERT_LIKE,
    "electra": _BERT_LIKE,
    "camembert": _BERT_LIKE,
}


def targets_for(model_type: str) -> Targets:
    """The adapter targets for `model_type`.

    Raises:
        UnsupportedModelError: the type has no row in TARGETS.
    """
    try:
        return TARGETS[model_type]
    except KeyError:
        raise UnsupportedModelError(model_type, list(TARGETS)) from None
