"""`hub export --format onnx`: base + adapter + head as one ONNX graph.

The adapter is attached (verified as for `hub predict`) and activated on an AdapterModel, and
the whole forward pass is traced by `torch.onnx.export`'s TorchScript exporter (`dynamo=False`:
it handles the compact BERT's SDPA and the wrappers' Python dispatch, and needs no
onnxscript), with batch and sequence axes dynamic. What `hub predict --runtime onnx` needs to
tokenise and decode (task, labels, max_length, the base's identity) goes in the model's
metadata under METADATA_KEY, so the .onnx file is all there is to carry.
"""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from hubcli.errors import AdapterError, OptionError
from hubcli.format.vocab import DEFAULT_MAX_LENGTH

if TYPE_CHECKING:
    from hubcli.signing.policy import VerifiedBundle

METADATA_KEY = "hubcli"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OPSET = 17
TOKEN_HEADS = ("token_classification", "question_answering")


def check_onnx_out(out: Path, *, overwrite: bool) -> None:
    """`out` can take the graph: a new file, or (with `overwrite`) one to replace.

    Raises:
        OptionError: `out` is a folder, or a file and no `overwrite`.
    """
    if out.is_dir():
        raise OptionError("--out", out, "is a folder", hint="name the .onnx file to write, "
                          "e.g. --out sst2.onnx")
    if out.exists() and not overwrite:
        raise OptionError("--out", out, "exists already",
                          hint="pass --overwrite to replace it, or choose another --out")


def export_onnx(adapter_dir: Path, out: Path, *, base: str | None = None,
                allow_base_mismatch: bool = False, allow_unsigned: bool = False,
                notify: Callable[[str], None] = lambda _m: None) -> dict:
    """Write `out` (.onnx) for the adapter in `adapter_dir`; returns the metadata stored in it.

    Raises:
        SignatureError, BundleError, ManifestError, BaseMismatchError, AdapterError: as for
            attaching; AdapterError also for a full fine-tune, and when the exported graph
            fails `onnx.checker`.
    """
    from hubcli.local.attach import verify_adapter

    refuse_finetune(Path(adapter_dir))
    bundle = verify_adapter(Path(adapter_dir), allow_unsigned=allow_unsigned, notify=notify)
    return export_verified(bundle, out, base=base, allow_base_mismatch=allow_base_mismatch,
                           notify=notify)


def refuse_finetune(folder: Path) -> None:
    """Raises AdapterError: `folder` is a full fine-tune (an ONNX graph is made of a base and
    an adapter; it has no manifest)."""
    from hubcli.local.finetune_dir import is_finetune_dir

    if is_finetune_dir(folder):
        raise AdapterError(f"{folder} is a full fine-tune, not an adapter",
                           hint="export an adapter folder; a fine-tuned model is a whole "
                                "transformers model, which torch.onnx exports as it is")


def export_verified(bundle: VerifiedBundle, out: Path, *, base: str | None = None,
                    allow_base_mismatch: bool = False,
                    notify: Callable[[str], None] = lambda _m: None) -> dict:
    """`export_onnx` for an adapter verified already.

    Raises:
        BaseMismatchError, AdapterError: as for attaching, or the graph fails `onnx.checker`.
    """
    from hubcli.local.attach import attach_to_fresh_base

    model, loaded = attach_to_fresh_base(bundle, base=base,
                                         allow_base_mismatch=allow_base_mismatch, notify=notify)
    manifest = bundle.manifest
    meta = {"name": manifest["name"], "version": manifest["version"], "task": manifest["task"],
            "head": manifest["head"],
            "max_length": int(manifest["training"].get("max_length", DEFAULT_MAX_LENGTH)),
            "base": {"name": manifest["base_model"]["name"],
                     "content_hash": loaded.info.content_hash,
                     "tokenizer_hash": loaded.info.tokenizer_hash}}
    if "text_pairs" in manifest["training"]:  # the inputs it takes (`Task.check_inputs`)
        meta["text_pairs"] = manifest["training"]["text_pairs"]
    token_level = manifest["head"]["type"] in TOKEN_HEADS
    _trace(model, Path(out), meta, token_level)
    return meta


def _trace(model, out: Path, meta: dict, token_level: bool) -> None:
    import onnx
    import torch

    class Logits(torch.nn.Module):
        # positional inputs in INPUTS order, as the exporter names them
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.inner(input_ids, attention_mask, token_type_ids)

    # Row 1 is padded: the compact BERT skips its attention mask when nothing is padded, and
    # tracing records the branch the example takes, so the example must take the masked one.
    ids = torch.arange(2, 18).reshape(2, 8)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUTS}
    axes["logits"] = {0: "batch", 1: "sequence"} if token_level else {0: "batch"}
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        staged = Path(tmp) / out.name
        with torch.no_grad(), warnings.catch_warnings():
            # the tracer warns about the padding branch, which the example pins on purpose, and
            # torch about the TorchScript exporter, chosen on purpose (see the module's doc)
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(Logits(model).eval(), (ids, mask, torch.zeros_like(ids)),
                              str(staged), input_names=list(INPUTS), output_names=["logits"],
                              dynamic_axes=axes, opset_version=OPSET, dynamo=False)
        graph = onnx.load(str(staged))
        graph.metadata_props.add(key=METADATA_KEY, value=json.dumps(meta, sort_keys=True))
        try:
            onnx.checker.check_model(graph, full_check=True)
        except onnx.checker.ValidationError as e:
            raise AdapterError(f"the exported ONNX graph is invalid: {e}") from None
        onnx.save(graph, str(staged))
        staged.replace(out)
