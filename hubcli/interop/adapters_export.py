"""`hub export --format adapters`: one of our adapters (Houlsby or LoRA) as a folder the
`adapters` library (AdapterHub) loads with `load_adapter(DIR, use_safetensors=True)` (its
loader reads pickles otherwise, and we write none), computing our logits.

The inverse of `adapters_import`: our bottleneck becomes its bottleneck of the same
arithmetic and placement, scaling 1 (Houlsby's form its "double_seq_bn", `reads` normed its
"seq_bn" with the `residual_before_ln` of our `skip`, `reads` input its "par_bn"; see
`adapters_format.FORMS`), our classification head its classification head (CLS
pooling, dense, tanh, out), our regression head the same with num_labels 1, our tagging head
its tagging head, our QA head its question_answering head; our LoRA its LoRA. LayerNorm
deltas have no place in that format: refused unless dropped on purpose; then, given labelled
data, the change in the primary metric is measured. What it cannot express (mean pooling,
fusions, other model types, a `reads`/`skip` form it has no counterpart for) is refused,
naming it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hubcli import __version__
from hubcli.errors import AdapterError, UsageError
from hubcli.interop.adapters_format import (ACTIVATIONS, ADAPTER_CONFIG, ADAPTER_WEIGHTS,
                                            FORMS, HEAD_CONFIG, HEAD_WEIGHTS, HEADS,
                                            LibraryHead, LORA_MATRICES, LORA_REQUIRED, MODEL_CLASS,
                                            PLACEMENTS, REQUIRED, WEIGHT_PREFIX)

_LIBRARY_ACTIVATION = {ours: theirs for theirs, ours in ACTIVATIONS.items() if theirs != "silu"}
_SITE = {ours: theirs for theirs, ours in PLACEMENTS.items()}
_MATRIX = {ours: theirs for theirs, ours in LORA_MATRICES.items()}


@dataclass
class ExportReport:
    out: Path
    dropped_layernorm: bool
    metric: str | None = None    # measured with and without the LayerNorm deltas, given data
    with_deltas: float | None = None
    without_deltas: float | None = None


def check_library_out(out: Path, *, overwrite: bool) -> None:
    """`out` can take the library's folder: new, empty, or (with `overwrite`) one an earlier
    export wrote, replaced only once this one is written.

    Raises:
        OptionError: as `local.options.check_out`.
    """
    from hubcli.local.options import check_out

    check_out(out, overwrite=overwrite, markers=(ADAPTER_CONFIG,),
              what="an adapters-library folder", writer="`hub export --format adapters`")


def library_name(name: str) -> str:
    """`name` as the adapters library can hold it: it keeps adapters and heads in
    `nn.ModuleDict`, whose keys cannot contain '.'."""
    return name.replace(".", "_")


def export_adapters(adapter_dir: Path, out: Path, *, drop_layernorm_deltas: bool = False,
                    data: Path | None = None, base: str | None = None,
                    allow_base_mismatch: bool = False, allow_unsigned: bool = False,
                    notify: Callable[[str], None] = lambda _m: None) -> ExportReport:
    """Write the `adapters`-library folder `out` for the adapter in `adapter_dir`.

    Raises:
        UsageError: LayerNorm deltas and no `drop_layernorm_deltas`.
        AdapterError: something the format cannot express (named).
        SignatureError, BundleError, ManifestError, BaseMismatchError: as for attaching.
    """
    from hubcli.format import manifest as manifest_io
    from hubcli.local.finetune_dir import is_finetune_dir
    from hubcli.local.inference import load_predictor

    if is_finetune_dir(Path(adapter_dir)):
        raise AdapterError(f"{adapter_dir} is a full fine-tune, not an adapter")
    m = manifest_io.read(Path(adapter_dir))  # refuse what cannot go before loading anything
    library_head, adapter_cfg = _check(m)
    has_deltas = m["architecture"].get("layernorm", "frozen") != "frozen"
    if has_deltas and not drop_layernorm_deltas:
        raise UsageError("the adapter trains LayerNorm deltas, which the adapters library's "
                         "format has no place for",
                         hint="pass --drop-layernorm-deltas (and --data DEV to measure the change)")
    predictor = load_predictor(Path(adapter_dir), base=base,
                               allow_base_mismatch=allow_base_mismatch,
                               allow_unsigned=allow_unsigned, notify=notify)
    m = predictor.manifest  # the verified one
    tensors = predictor.model.adapter_state_dict(m["name"])
    report = ExportReport(Path(out), dropped_layernorm=has_deltas)
    if has_deltas and data is not None:
        _measure(predictor, data, report)
    elif data is not None:
        notify(f"notice: {m['name']} has no LayerNorm deltas, so --data measures nothing")
    name = library_name(m["name"])
    if name != m["name"]:
        notify(f"notice: the adapters library takes no '.' in a name: {m['name']} is exported "
               f"as {name}")
    _write(Path(out), {**m, "name": name}, library_head, adapter_cfg, tensors)
    return report


def _check(m: dict) -> tuple[LibraryHead, dict]:
    """(the library's head, its adapter config) for our manifest, or the refusal."""
    arch, head = m["architecture"], m["head"]
    if m.get("requires"):
        names = ", ".join(f"{r['name']} {r['version']}" for r in m["requires"])
        raise AdapterError(f"{m['name']} is a fusion or stack over {names}; the adapters "
                           "library's folder holds one adapter", hint="export each plain "
                           "adapter on its own, or use --format onnx for the whole composition")
    if m["base_model"]["model_type"] != "bert":
        raise AdapterError(f"base_model.model_type={m['base_model']['model_type']!r}: only BERT "
                           "bases are exported")
    library_head = HEADS[head["type"]]  # each of our head types has its counterpart
    if library_head.head_type == "classification" and head.get("pooling") != "cls":
        raise AdapterError(f"head.pooling={head.get('pooling')!r}: the adapters library's "
                           "classification head reads the first token only",
                           hint="train with --pooling cls to export")
    leave_out = [i for i in range(m["base_model"]["num_layers"]) if i not in arch["layers"]]
    if arch["type"] == "lora":
        return library_head, {**LORA_REQUIRED, "architecture": "lora", "r": arch["rank"],
                      "alpha": arch["alpha"], "dropout": 0.0, "init_weights": "lora",
                      "attn_matrices": [_MATRIX[p] for p in arch["placement"]],
                      "leave_out": leave_out}
    hidden, bottleneck = m["base_model"]["hidden_size"], arch["bottleneck"]
    factor = hidden / bottleneck
    if int(hidden // factor) != bottleneck:  # the library sizes its bottleneck so
        raise AdapterError(f"architecture.bottleneck={bottleneck} is not reachable as "
                           f"hidden_size // reduction_factor")
    form = (arch.get("reads", "output"), arch.get("skip", "output"))
    if form not in FORMS:
        raise AdapterError(f"architecture.reads={form[0]!r} with skip={form[1]!r} has no "
                           "counterpart in the adapters library's bottlenecks",
                           hint=f"exported: {', '.join(f'{r}/{k}' for r, k in FORMS)}")
    return library_head, {**REQUIRED, **FORMS[form], "adapter_residual_before_ln": False,
                  "scaling": 1.0, "dropout": 0.0, "init_weights": "bert",
                  "reduction_factor": factor,
                  "non_linearity": _LIBRARY_ACTIVATION[arch["non_linearity"]],
                  "mh_adapter": "attention_output" in arch["placement"],
                  "output_adapter": "ffn_output" in arch["placement"], "leave_out": leave_out}


def _measure(predictor, data: Path, report: ExportReport) -> None:
    import torch

    examples = predictor.task.read(data)
    report.metric = predictor.task.primary_metric
    report.with_deltas = predictor.evaluate(examples)[report.metric]
    name = predictor.manifest["name"]
    with torch.no_grad():
        for site in predictor.model.layernorm_sites.values():
            if name in site.deltas:  # every LayerNorm ("delta"), or its own layers'
                for p in site.deltas[name].parameters():
                    p.zero_()
    report.without_deltas = predictor.evaluate(examples)[report.metric]


def _write(out: Path, m: dict, library_head: LibraryHead, adapter_cfg: dict, tensors: dict) -> None:
    from safetensors.torch import save_file

    from hubcli.fsutil import staged_dir

    name, head = m["name"], m["head"]
    envelope = {"hidden_size": m["base_model"]["hidden_size"], "model_class": MODEL_CLASS,
                "model_name": m["base_model"]["name"], "model_type": m["base_model"]["model_type"],
                "name": name, "version": f"hubcli.{__version__}"}
    # the keyword arguments of its head's class, which its loader passes them to
    head_cfg = {"head_type": library_head.head_type, "num_labels": head["num_outputs"],
                "layers": library_head.layers,
                "activation_function": "tanh" if library_head.layers > 1 else None,
                "label2id": {label: i for i, label in enumerate(head["labels"])} or None,
                "dropout_prob": None}
    if library_head.head_type == "classification":
        head_cfg.update(use_pooler=False, bias=True)
    index = {ours: theirs for theirs, ours in library_head.index.items()}
    adapter_t, head_t = {}, {}
    for key, t in tensors.items():
        parts = key.split(".")
        if parts[0] == "adapters" and parts[2] in _MATRIX:  # adapters.{layer}.{q|v}.{A|B}.weight
            adapter_t[f"{WEIGHT_PREFIX}encoder.layer.{parts[1]}.attention.self.{parts[2]}.loras."
                      f"{name}.lora_{parts[3]}"] = t
        elif parts[0] == "adapters":  # adapters.{layer}.{placement}.{down|up}.{weight|bias}
            proj = "adapter_down.0" if parts[3] == "down" else "adapter_up"
            adapter_t[f"{WEIGHT_PREFIX}encoder.layer.{parts[1]}.{_SITE[parts[2]]}.adapters."
                      f"{name}.{proj}.{parts[4]}"] = t
        elif parts[0] == "head":
            head_t[f"heads.{name}.{index[parts[1]]}.{parts[2]}"] = t
        # layernorm.*: dropped, as checked and measured by the caller
    with staged_dir(out) as tmp:
        for file, cfg in ((ADAPTER_CONFIG, adapter_cfg), (HEAD_CONFIG, head_cfg)):
            (tmp / file).write_text(json.dumps({"config": cfg, **envelope}, indent=2) + "\n")
        save_file(adapter_t, str(tmp / ADAPTER_WEIGHTS[0]), metadata={"format": "pt"})
        save_file(head_t, str(tmp / HEAD_WEIGHTS[0]), metadata={"format": "pt"})
