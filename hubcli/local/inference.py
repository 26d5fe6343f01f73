"""Running a model with an attached adapter: batched, length-sorted, in inference mode."""

from __future__ import annotations

import itertools
import threading

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hubcli.format.vocab import BASE, DEFAULT_MAX_LENGTH
from hubcli.local.batching import inference_batches

INFER_BATCH = 64
# Below this many tokens in all, inference runs on one thread: starting torch's thread pool
# costs more (0.1-0.3 s on a busy 2-core machine) than a few sentences gain from it, and
# `hub predict "one sentence"` is mostly start-up.
FEW_TOKENS = 2048


def _unpadded(row_logits, feature: dict):
    # token-level heads: drop this feature's padding before decoding
    return row_logits[:len(feature["input_ids"])] if row_logits.dim() == 2 else row_logits


def run_model(model, task, features: list[dict], examples: list, labels: list[str],
              batch_size: int = INFER_BATCH) -> list[dict]:
    """Predictions for `examples` (one dict each) from their encoded `features`."""
    import torch

    logits: list = [None] * len(features)
    device = model_device(model)
    with torch.inference_mode(), _threads_for(features):
        for idx in inference_batches(features, batch_size):
            batch = task.collate([features[i] for i in idx])
            out = _to_cpu(model(*_inputs(batch, device)))
            for row, i in enumerate(idx):
                logits[i] = _unpadded(out[row], features[i])
    return task.decode(logits, features, examples, labels)


def model_device(model):
    """The device `model`'s weights are on."""
    return next(model.parameters()).device


def to_device(batch: dict, device) -> dict:
    """`batch`'s tensors on `device` (the same dict back on the CPU)."""
    if str(device) == "cpu":
        return batch
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def _inputs(batch: dict, device) -> tuple:
    """(input_ids, attention_mask, token_type_ids or None) of `batch`, on `device`."""
    batch = to_device(batch, device)
    return batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids")


def _to_cpu(t):
    """A batch's output on the CPU, in float32, once (decoding reads it row by row)."""
    return t.float().cpu()


@contextmanager
def _threads_for(features: list[dict]):
    """One torch thread while running `features` if they are few tokens (FEW_TOKENS)."""
    import torch

    previous = torch.get_num_threads()
    # only the main thread switches: a thread's first torch call copies the setting, so a
    # switch from one of hub serve's workers could leave another on one thread for good
    few = (threading.current_thread() is threading.main_thread()
           and sum(len(f["input_ids"]) for f in features) < FEW_TOKENS)
    if few:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if few:
            torch.set_num_threads(previous)


@dataclass
class RowGroup:
    """Examples that go through one adapter, and where their predictions belong."""

    adapter: str
    task: Any
    labels: list[str]
    max_length: int
    examples: list
    positions: list[int]


def _embedding(hidden, mask) -> dict:
    """What a `BASE` row predicts: the base's sentence embedding, the mean of its last hidden
    states over the real tokens, L2-normalised (how sentence-transformers pools the packaged
    all-MiniLM-L6-v2)."""
    import torch

    mean = (hidden * mask.unsqueeze(-1)).sum(0) / mask.sum()
    return {"embedding": [round(v, 6) for v in torch.nn.functional.normalize(mean, dim=0).tolist()]}


def run_routed(model, tokenizer, groups: list[RowGroup], batch_size: int = INFER_BATCH
               ) -> list[dict]:
    """Predictions for every group's examples, batches mixing adapters row by row (one routed
    pass per batch, `AdapterModel.forward_routed`), placed at the groups' positions. A group
    for `BASE` gets the base's sentence embeddings."""
    return _run_routed(model, groups, _encoded(groups, tokenizer), batch_size)


def _encoded(groups: list[RowGroup], tokenizer) -> list[list[dict]]:
    """Each group's examples encoded by its task, for inference."""
    return [g.task.encode(g.examples, tokenizer, g.labels, g.max_length, with_targets=False)
            for g in groups]


def _run_routed(model, groups: list[RowGroup], encoded: list[list[dict]], batch_size: int
                ) -> list[dict]:
    import torch

    feats = [(g, f) for g, group_feats in enumerate(encoded) for f in group_feats]
    logits: list = [None] * len(feats)
    device = model_device(model)
    with torch.inference_mode(), _threads_for([f for _, f in feats]):
        for idx in inference_batches([f for _, f in feats], batch_size):
            # the groups share one tokenizer, so any group's task pads alike
            batch = groups[0].task.collate([feats[i][1] for i in idx])
            adapters = [groups[feats[i][0]].adapter for i in idx]
            hidden, out = model.forward_routed(*_inputs(batch, device), adapters,
                                               logits_to="cpu")
            if BASE in adapters:  # their embeddings are read from the hidden states
                hidden = _to_cpu(hidden)
            for row, i in enumerate(idx):
                logits[i] = (_embedding(hidden[row], batch["attention_mask"][row])
                             if groups[feats[i][0]].adapter == BASE
                             else _unpadded(out[row], feats[i][1]))
    ends = list(itertools.accumulate(len(f) for f in encoded))  # the groups' rows, in turn
    return _placed(groups, encoded, [logits[end - len(f):end] for f, end in zip(encoded, ends)])


def run_parallel(model, tokenizer, groups: list[RowGroup], batch_size: int = INFER_BATCH
                 ) -> list[dict]:
    """Predictions for groups over the same examples, each through its own adapter (a
    Parallel), placed at the groups' positions. Where the groups read the same tokens and all
    have heads, each batch is one `AdapterModel.forward_parallel`, which runs the layers
    below every adapter once; otherwise (tasks that tokenize differently, `BASE`, an adapter
    without a head) the rows of all the groups are routed as one mixed batch, as
    `run_routed` does."""
    import torch

    from hubcli.core.composition import Parallel

    feats = _encoded(groups, tokenizer)
    tokens = [[(f["input_ids"], f.get("token_type_ids")) for f in group] for group in feats]
    if (any(g.adapter == BASE or not model.has_head(g.adapter) for g in groups)
            or any(t != tokens[0] for t in tokens[1:])):
        return _run_routed(model, groups, feats, batch_size)
    block = Parallel(*(g.adapter for g in groups))
    logits: list[list] = [[None] * len(feats[0]) for _ in groups]
    device = model_device(model)
    with torch.inference_mode(), _threads_for([f for group in feats for f in group]):
        for idx in inference_batches(feats[0], batch_size):
            batch = groups[0].task.collate([feats[0][i] for i in idx])
            out = model.forward_parallel(*_inputs(batch, device), block, logits_to="cpu")
            for g, group in enumerate(groups):
                for row, i in enumerate(idx):
                    logits[g][i] = _unpadded(out[group.adapter][row], feats[g][i])
    return _placed(groups, feats, logits)


def _placed(groups: list[RowGroup], feats: list[list[dict]], logits: list[list]) -> list[dict]:
    """Each group's predictions (decoded from its rows' `logits`; a `BASE` group's are its
    embeddings already) at the group's positions."""
    results: list = [None] * sum(len(g.positions) for g in groups)
    for group, f, out in zip(groups, feats, logits):
        preds = out if group.adapter == BASE else group.task.decode(out, f, group.examples,
                                                                    group.labels)
        for pos, pred in zip(group.positions, preds):
            results[pos] = pred
    return results


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
        """One prediction per example.

        Raises:
            UsageError: an input the adapter was not trained to take (`Task.check_inputs`).
        """
        self._check(examples)
        feats = self.task.encode(examples, self.tokenizer, self.labels, self.max_length,
                                 with_targets=False)
        return run_model(self.model, self.task, feats, examples, self.labels)

    def _check(self, examples: list) -> None:
        """Raises what `Task.check_inputs` raises for an example this adapter was not
        trained to take."""
        m = self.manifest or {}
        self.task.check_inputs(examples, m.get("training", {}).get("text_pairs"),
                               m.get("name", str(self.source)))

    def evaluate(self, examples: list) -> dict[str, float]:
        """The task's metrics on labelled `examples`.

        Raises:
            DataError: an example the adapter was not trained to take (`Task.check_inputs`).
        """
        self._check(examples)
        feats = self.task.encode(examples, self.tokenizer, self.labels, self.max_length)
        preds = run_model(self.model, self.task, feats, examples, self.labels)
        return self.task.metrics(preds, examples, self.labels)


def load_predictor(path: Path, *, base: str | None = None, allow_base_mismatch: bool = False,
                   allow_unsigned: bool = False, device: str = "cpu",
                   notify: Callable[[str], None] = lambda _msg: None) -> Predictor:
    """Load the base and attach the adapter in `path` (or load a full fine-tune folder), on
    `device` (`--device`: auto, cpu, cuda, cuda:N or mps; see local/device.py).

    The adapter folder is verified once (`verify_adapter`); loading and attaching use that.

    Raises:
        AdapterError / ManifestError / BundleError: the folder is not usable.
        SignatureError: unsigned or untrusted, and not allowed.
        BaseMismatchError: the base differs from the one it was trained on.
        ModelError: the base cannot be loaded.
        OptionError: `device` is unknown or not on this machine (before anything loads).
    """
    from hubcli.local.device import resolve

    where = resolve(device)
    predictor = _load(Path(path), base, allow_base_mismatch, allow_unsigned, notify)
    if where != "cpu":
        predictor.model.to(where)
    predictor.task.notify = notify  # warnings about the inputs (a text cut short)
    return predictor


def _load(path: Path, base: str | None, allow_base_mismatch: bool, allow_unsigned: bool,
          notify: Callable[[str], None]) -> Predictor:
    from hubcli.local.finetune_dir import is_finetune_dir, load_finetune_dir
    from hubcli.tasks import get_task

    if is_finetune_dir(path):
        model, tokenizer, doc = load_finetune_dir(path)
        return Predictor(model, tokenizer, get_task(doc["task"], doc["head"]),
                         list(doc["head"].get("labels", ())),
                         int(doc["training"].get("max_length", DEFAULT_MAX_LENGTH)), doc, path)
    from hubcli.local.attach import attach_to_fresh_base, verify_adapter

    bundle = verify_adapter(path, allow_unsigned=allow_unsigned, notify=notify)
    model, loaded = attach_to_fresh_base(bundle, base=base,
                                         allow_base_mismatch=allow_base_mismatch, notify=notify)
    manifest = bundle.manifest
    return Predictor(model, loaded.tokenizer, get_task(manifest["task"], manifest["head"]),
                     list(manifest["head"]["labels"]),
                     int(manifest["training"].get("max_length", DEFAULT_MAX_LENGTH)), manifest, path)


def read_labelled(adapter: Path, data: Path, *, fmt: str | None, columns) -> list:
    """The examples of `data`, read with the task of the adapter (or full fine-tune) in
    `adapter` before any model loads: a wrong file costs a one-line error, not a loaded base.

    Raises:
        ManifestError: `adapter` is not an adapter folder.
        UsageError: `data`'s extension names a format the adapter's task does not read (the
            message names the adapter and its task), or `fmt` does not apply.
        DataError: see the task's read().
    """
    from hubcli.format import manifest as manifest_io
    from hubcli.local.finetune_dir import is_finetune_dir, read_description
    from hubcli.tasks import get_task

    adapter = Path(adapter)
    if is_finetune_dir(adapter):
        task = get_task(read_description(adapter)["task"])
        reader = f"the {task.name} model {adapter.name} (a full fine-tune)"
    else:
        manifest = manifest_io.read(adapter)
        task = get_task(manifest["task"])
        reader = f"the {task.name} adapter {manifest['name']}"
    task.data_format(Path(data), fmt, reader=reader)
    return task.read(Path(data), fmt=fmt, columns=columns)
