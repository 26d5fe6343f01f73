"""The `adapters` library's (AdapterHub's) folder format, as `save_adapter` writes it: file
names, the bottleneck settings our Houlsby method computes the same, and how its tensor and
head names correspond to ours. Shared by `adapters_import` and `adapters_export`.

Its bottleneck at a sublayer with output h (after dense and dropout), input x and LayerNorm
LN, with f(z) = scaling * up(act(down(z))) and `original_ln_after` true, computes (eval):
    double_seq_bn, or any with original_ln_before false     LN(h + f(h) + x)
    original_ln_before true, residual_before_ln true         LN(h + f(LN(h + x)) + x)
      (seq_bn's default)                     false           LN(LN(h + x) + f(LN(h + x)) + x)
                                             "post_add"      LN(h + x + f(LN(h + x)) + x)
    is_parallel true (par_bn; the two above are unused)      LN(h + f(x) + x)
which are our Houlsby method's `reads`/`skip` forms in FORMS.
"""

from __future__ import annotations

import re
from typing import NamedTuple

ADAPTER_CONFIG, HEAD_CONFIG = "adapter_config.json", "head_config.json"
ADAPTER_WEIGHTS = ("adapter.safetensors", "pytorch_adapter.bin")
HEAD_WEIGHTS = ("model_head.safetensors", "pytorch_model_head.bin")
LIBRARY = "adapters"

# bottleneck fields whose value must be this for our Houlsby to compute what the library does
REQUIRED = {"original_ln_after": True, "ln_before": False, "ln_after": False,
            "use_gating": False, "phm_layer": False, "inv_adapter": None, "cross_adapter": False}
# our (reads, skip) -> the library's fields that compute the same (see the module's doc)
FORMS = {("output", "output"): {"is_parallel": False, "original_ln_before": False,
                                "residual_before_ln": True},
         ("normed", "output"): {"is_parallel": False, "original_ln_before": True,
                                "residual_before_ln": True},
         ("normed", "normed"): {"is_parallel": False, "original_ln_before": True,
                                "residual_before_ln": False},
         ("normed", "sum"): {"is_parallel": False, "original_ln_before": True,
                             "residual_before_ln": "post_add"},
         ("input", "output"): {"is_parallel": True, "original_ln_before": False,
                               "residual_before_ln": True}}
ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu", "tanh": "tanh"}
# what a config without "version" (adapter-transformers 2.x) means by a non_linearity, as the
# library reads one (its ACTIVATION_RENAME): there "gelu" was the tanh approximation
LEGACY_ACTIVATIONS = {"gelu": "gelu_new", "gelu_orig": "gelu"}
# weight names of older versions, renamed as the library renames them on loading
LEGACY_NAMES = {"attention_text_task_adapters": "adapters",
                "attention_text_lang_adapters": "adapters",
                "layer_text_task_adapters": "adapters", "layer_text_lang_adapters": "adapters"}
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


class LibraryHead(NamedTuple):
    """The library's head that computes what one of ours does (eval: its dropouts are
    identity), with `bias` true and, where `layers` is 2, `activation_function` "tanh"."""

    head_type: str           # its head_type
    task: str                # our task's name
    layers: int              # its `layers`: Linears in the head (2: dense, tanh, out)
    index: dict[str, str]    # its Linear's index in the head's Sequential -> our name
    num_labels: int | None   # its num_labels where our head fixes it, which then has no labels


_SEQUENCE, _TOKEN = {"1": "dense", "4": "out"}, {"1": "out"}
# our head type -> the library's. Its classification head reads the first token, then
# dense, tanh, out, as our SequenceHead with pooling cls; with num_labels 1 it is its regression
# (MSE loss). Its QA head is one Linear per token whose outputs split into [start, end], the
# order of our QA task's two channels.
HEADS = {"sequence_classification": LibraryHead("classification", "classification", 2, _SEQUENCE,
                                                None),
         "regression": LibraryHead("classification", "regression", 2, _SEQUENCE, 1),
         "token_classification": LibraryHead("tagging", "tagging", 1, _TOKEN, None),
         "question_answering": LibraryHead("question_answering", "qa", 1, _TOKEN, 2)}
# the model class and weight prefix its BertAdapterModel saves under
MODEL_CLASS, WEIGHT_PREFIX = "BertAdapterModel", "bert."
