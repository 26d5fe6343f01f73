"""The injection core: adapters (Houlsby bottlenecks with LayerNorm deltas, or LoRA) on a frozen
encoder, one per row of a batch if need be.

Layout follows PEFT's tuners: `config.py` (what an adapter is, one config class per method),
`targets.py` (where it goes, per model type and method, as data), `spec.py` (the tensors an
adapter owns; torch-free so the registry can check bundles without torch), `layer.py` (module
wrappers keeping `base_layer`), `routing.py` (a different adapter per row: stacked weights and
gathered batched products), `heads.py` (task heads), `model.py` (find targets, swap modules,
manage named adapters), `basehash.py`
(content hash of a base model), `base.py` (load a base), `bert.py` (a compact BERT with
transformers' module names, used for plain BERT checkpoints so predicting never imports
transformers' modelling code) and `ops.py` (a faster CPU dropout).

This package imports no CLI, web or HTTP code. Only `spec`, `config` and `targets` are
importable without torch.
"""
