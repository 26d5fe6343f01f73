"""The output of `hub train --full-finetune`: a whole model folder, deliberately not an adapter.

Layout: the encoder as a Hugging Face model folder (config.json, model.safetensors, tokenizer
files), `head.safetensors`, and `finetune.json` describing task, head, base and metrics. It has
no manifest.json, so nothing mistakes it for a publishable adapter.
"""

from __future__ import annotations

import json
from pathlib import Path

from hubcli.fsutil import staged_dir

MARKER = "finetune.json"


def is_finetune_dir(path: Path) -> bool:
    return (Path(path) / MARKER).is_file()


def write_finetune_dir(out: Path, model, base, task: str, training: dict, metrics: dict) -> None:
    """Save encoder, tokenizer, head and description, all or nothing."""
    from safetensors.torch import save_file

    from hubcli.local.adapterdir import framework_versions, now_iso

    with staged_dir(out) as tmp:
        model.encoder.save_pretrained(tmp)
        base.tokenizer.save_pretrained(tmp)
        save_file({k: v.detach().contiguous() for k, v in model.head.state_dict().items()},
                  str(tmp / "head.safetensors"))
        doc = {"kind": "full-finetune", "note": "not an adapter: a complete fine-tuned model",
               "task": task, "head": model.head_config.to_manifest(),
               "base_model": base.info.to_manifest(), "training": training, "metrics": metrics,
               "created": now_iso(), "framework": framework_versions()}
        (tmp / MARKER).write_text(json.dumps(doc, indent=2) + "\n")


def read_description(path: Path) -> dict:
    """finetune.json of a full fine-tune folder (what it was trained for, on which base)."""
    return json.loads((Path(path) / MARKER).read_text())


def load_finetune_dir(path: Path):
    """The model, tokenizer and description (finetune.json) of a full fine-tune folder; the
    caller (`inference.load_predictor`) wraps them, so this module never imports inference."""
    from safetensors.torch import load_file

    from hubcli.base.load import load_encoder, load_tokenizer, read_config
    from hubcli.core.heads import HeadConfig
    from hubcli.core.model import FullFinetuneModel

    path = Path(path)
    doc = read_description(path)
    head = HeadConfig.from_manifest(doc["head"])
    model = FullFinetuneModel(load_encoder(path, read_config(path)), head)
    model.head.load_state_dict(load_file(str(path / "head.safetensors")))
    model.eval()
    return model, load_tokenizer(path), doc
