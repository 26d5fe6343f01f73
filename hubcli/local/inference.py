"""Running a model with an attached adapter: batched, length-sorted, in inference mode."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hubcli.format.vocab import DEFAULT_MAX_LENGTH
from hubcli.local.batching import inference_batches

INFER_BATCH = 64


def run_model(model, task, features: list[dict], examples: list, labels: list[str],
              batch_size: int = INFER_BATCH) -> list[dict]:
    """Predictions for `examples` (one dict each) from their encoded `features`."""
    import torch

    logits: list = [None] * len(features)
    with torch.inference_mode():
        for idx in inference_batches(features, batch_size):
            batch = task.collate([features[i] for i in idx])
            out = model(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
            for row, i in enumerate(idx):
                n = len(features[i]["input_ids"])
                # token-level heads: drop this feature's padding before decoding
                logits[i] = out[row, :n] if out.dim() == 3 else out[row]
    return task.decode(logits, features, examples, labels)


@dataclass
class Predictor:
    """A base with one adapter (or a full fine-tune) attached, ready to predict."""

    model: Any
    tokenizer: Any
    task: Any
    labels: list[str]
    max_length: int
    manifest: dict | None
    source: Path

    def predict(self, examples: list) -> list[dict]:
        feats = self.task.encode(examples, self.tokenizer, self.labels, self.max_length,
                                 with_targets=False)
        return run_model(self.model, self.task, feats, examples, self.labels)

    def evaluate(self, examples: list) -> dict[str, float]:
        feats = self.task.encode(examples, self.tokenizer, self.labels, self.max_length)
        preds = run_model(self.model, self.task, feats, examples, self.labels)
        return self.task.metrics(preds, examples, self.labels)


def load_predictor(path: Path, *, base: str | None = None, allow_base_mismatch: bool = False,
                   allow_unsigned: bool = False,
                   notify: Callable[[str], None] = lambda _msg: None) -> Predictor:
    """Load the base and attach the adapter in `path` (or load a full fine-tune folder).

    Raises:
        AdapterError / ManifestError / BundleError: the folder is not usable.
        SignatureError: unsigned or untrusted, and not allowed.
        BaseMismatchError: the base differs from the one it was trained on.
    """
    from hubcli.local.finetune_dir import is_finetune_dir, load_finetune_dir

    from hubcli.tasks import get_task

    path = Path(path)
    if is_finetune_dir(path):
        model, tokenizer, doc = load_finetune_dir(path)
        return Predictor(model, tokenizer, get_task(doc["task"]), list(doc["head"].get("labels", ())),
                         int(doc["training"].get("max_length", DEFAULT_MAX_LENGTH)), None, path)
    from hubcli.local.attach import attach_to_fresh_base

    model, loaded, manifest = attach_to_fresh_base(
        path, base=base, allow_base_mismatch=allow_base_mismatch,
        allow_unsigned=allow_unsigned, notify=notify)
    return Predictor(model, loaded.tokenizer, get_task(manifest["task"]),
                     list(manifest["head"]["labels"]),
                     int(manifest["training"].get("max_length", DEFAULT_MAX_LENGTH)), manifest, path)
