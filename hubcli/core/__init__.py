"""The injection core: Houlsby bottleneck adapters and LayerNorm deltas on a frozen encoder.

Layout follows PEFT's tuners: `config.py` (what an adapter is), `targets.py` (where it goes, per
model type, as data), `spec.py` (the tensors an adapter owns; torch-free so the registry can
check bundles without torch), `layer.py` (module wrappers keeping `base_layer`), `heads.py`
(task heads), `model.py` (find targets, swap modules, manage named adapters), `basehash.py`
(content hash of a base model), `base.py` (load a base), `bert.py` (a compact BERT with
transformers' module names, used for plain BERT checkpoints so predicting never imports
transformers' modelling code) and `ops.py` (a faster CPU dropout).

This package imports no CLI, web or HTTP code. Only `spec`, `config` and `targets` are
importable without torch.
"""
