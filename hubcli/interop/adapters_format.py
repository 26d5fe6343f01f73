"""The `adapters` library's (AdapterHub's) folder format, as `save_adapter` writes it: file
names, the bottleneck settings our Houlsby method computes the same, and how its tensor and
head names correspond to ours. Shared by `adapters_import` and `adapters_export`.
"""

from __future__ import annotations

import re

ADAPTER_CONFIG, HEAD_CONFIG = "adapter_config.json", "head_config.json"
ADAPTER_WEIGHTS = ("adapter.safetensors", "pytorch_adapter.bin")
HEAD_WEIGHTS = ("model_head.safetensors", "pytorch_model_head.bin")
LIBRARY = "adapters"

# bottleneck fields whose value must be this for our Houlsby to compute what the library does
REQUIRED = {"original_ln_before": False, "original_ln_after": True, "ln_before": False,
            "ln_after": False, "use_gating": False, "phm_layer": False, "is_parallel": False,
            "inv_adapter": None, "cross_adapter": False}
ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu", "tanh": "tanh"}
PLACEMENTS = {"attention.output": "attention_output", "output": "ffn_output"}
ADAPTER_KEY = re.compile(r"encoder\.layer\.(\d+)\.(attention\.output|output)\.adapters\."
                         r"[^.]+\.(adapter_down\.0|adapter_up)\.(weight|bias)$")
LORA_KEY = re.compile(r"encoder\.layer\.(\d+)\.attention\.self\.(query|value)\.loras\."
                      r"[^.]+\.lora_(A|B)$")
# LoRA fields whose value must be this for our LoRA to compute what the library does
LORA_REQUIRED = {"selfattn_lora": True, "intermediate_lora": False, "output_lora": False,
                 "composition_mode": "add", "use_gating": False, "use_dora": False,
                 "vera_d": None, "vera_b": None}
LORA_MATRICES = {"q": "query", "v": "value"}
# (task, our head type, the library's layers, {its Linear's index: our name})
HEADS = {"classification": ("classification", "sequence_classification", 2,
                            {"1": "dense", "4": "out"}),
         "tagging": ("tagging", "token_classification", 1, {"1": "out"})}
# the model class and weight prefix its BertAdapterModel saves under
MODEL_CLASS, WEIGHT_PREFIX = "BertAdapterModel", "bert."
