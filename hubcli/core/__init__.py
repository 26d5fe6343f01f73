"""The injection core: adapters (Houlsby bottlenecks with LayerNorm deltas, or LoRA) on a frozen
encoder, one per row of a batch if need be.

Layout follows PEFT's tuners: `config.py` (what an adapter is, one config class per method),
`targets.py` (where it goes, per model type and method, as data), `layer.py` (module wrappers
keeping `base_layer`), `routing.py` (a different adapter per row), `gathered.py` (a routed
site's adapters all at once over stacked weights: batched, gathered products),
`composition.py` (Stack, Parallel and Fuse as data), `heads.py` (task heads), `model.py` (find
targets, swap modules, manage named adapters), `passes.py` (routed and Parallel passes),
`names.py` (adapter names, dots included, as module keys), `bert.py` (a compact BERT with
transformers' module names, used for plain BERT checkpoints so predicting never imports
transformers' modelling code) and `ops.py` (a faster CPU dropout). The tensors an adapter owns
are named in `hubcli/format/spec.py` (torch-free, shared with the registry); base loading and
hashing live in `hubcli/base/`.

This package imports no CLI, web or HTTP code. Only `config` and `targets` are importable
without torch.
"""
