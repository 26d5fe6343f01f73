"""Predicting with an exported ONNX graph under onnxruntime: `hub predict --runtime onnx`.

Nothing here imports torch: the task encodes with the base's tokenizer, pads with
`Task.padded_inputs`, and decodes numpy logits. An adapter folder is exported once and kept
in HUB_HOME's cache (ONNX_CACHE_DIR), keyed by its verified manifest (which carries the
weights' digest) and the base asked for, the `CACHE_KEEP` most recently used kept; the folder
is verified, and the graph's base checked against the manifest's, on every run, as for the
PyTorch path.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from hubcli.errors import AdapterError, ModelError
from hubcli.interop.onnx_export import INPUTS, METADATA_KEY, TOKEN_HEADS
from hubcli.local.batching import inference_batches
from hubcli.local.inference import INFER_BATCH
from hubcli.settings import ONNX_CACHE_DIR, home_path

CACHE_KEEP = 8  # graphs kept in the cache, most recently used first


@dataclass
class OnnxPredictor:
    """An ONNX graph (base + adapter + head), its tokenizer and task, ready to predict."""

    session: Any  # onnxruntime.InferenceSession
    tokenizer: Any
    task: Any
    labels: list[str]
    max_length: int
    meta: dict

    def logits(self, batch: dict[str, list[list[int]]]):
        """The graph's logits (numpy) for padded inputs (absent token types are zeros)."""
        import numpy as np

        ids = np.asarray(batch["input_ids"], dtype=np.int64)
        feed = {k: np.asarray(batch[k], dtype=np.int64) if k in batch else np.zeros_like(ids)
                for k in INPUTS}
        return self.session.run(["logits"], feed)[0]

    def predict(self, examples: list, batch_size: int = INFER_BATCH) -> list[dict]:
        """One prediction per example, as `Predictor.predict` gives them.

        Raises:
            UsageError: an input the adapter was not trained to take (`Task.check_inputs`).
        """
        self.task.check_inputs(examples, self.meta.get("text_pairs"), self.meta["name"])
        feats = self.task.encode(examples, self.tokenizer, self.labels, self.max_length,
                                 with_targets=False)
        token_level = self.meta["head"]["type"] in TOKEN_HEADS
        logits: list = [None] * len(feats)
        for idx in inference_batches(feats, batch_size):
            out = self.logits(self.task.padded_inputs([feats[i] for i in idx]))
            for row, i in enumerate(idx):
                logits[i] = out[row][:len(feats[i]["input_ids"])] if token_level else out[row]
        return self.task.decode(logits, feats, examples, self.labels)


def load_onnx(path: Path, *, base: str | None = None, threads: int | None = None
              ) -> OnnxPredictor:
    """An OnnxPredictor for a graph written by `export_onnx`, with its base's tokenizer
    (`base`, else a local copy with the recorded content hash, else the recorded name).

    Raises:
        AdapterError: not a readable ONNX graph written by `hub export`.
        ModelError: onnxruntime is missing; the base's tokenizer cannot be found or differs
            from the one the graph was exported with.
    """
    ort = _onnxruntime()
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own untyped errors for unreadable graphs
        raise AdapterError(f"{path}: not a readable ONNX graph ({type(e).__name__})",
                           hint="write one with `hub export ADAPTER --format onnx`") from None
    raw = session.get_modelmeta().custom_metadata_map.get(METADATA_KEY)
    if raw is None:
        raise AdapterError(f"{path}: the graph has no {METADATA_KEY!r} metadata",
                           hint="write it with `hub export ADAPTER --format onnx`")
    meta = json.loads(raw)
    from hubcli.tasks import get_task

    return OnnxPredictor(session, _tokenizer(meta["base"], base),
                         get_task(meta["task"], meta["head"]), list(meta["head"]["labels"]),
                         int(meta["max_length"]), meta)


def load_onnx_for_adapter(adapter_dir: Path, *, base: str | None = None,
                          allow_base_mismatch: bool = False, allow_unsigned: bool = False,
                          notify: Callable[[str], None] = lambda _m: None) -> OnnxPredictor:
    """An OnnxPredictor for the adapter in `adapter_dir`, verified first, its graph exported
    on first use and cached; a damaged cached graph is exported again.

    Raises:
        SignatureError, BundleError, ManifestError, BaseMismatchError, AdapterError: as for
            attaching (a cached graph's base is checked as a base loaded would be; a full
            fine-tune is refused); ModelError as `load_onnx`.
    """
    from hubcli.interop.onnx_export import export_verified, refuse_finetune
    from hubcli.local.attach import check_base, verify_adapter

    refuse_finetune(Path(adapter_dir))
    bundle = verify_adapter(Path(adapter_dir), allow_unsigned=allow_unsigned, notify=notify)
    manifest_bytes = (Path(adapter_dir) / "manifest.json").read_bytes()
    key = hashlib.sha256(manifest_bytes + f"\0{base or ''}".encode()).hexdigest()[:32]
    cached = home_path(ONNX_CACHE_DIR) / f"{key}.onnx"
    if cached.is_file():
        try:
            predictor = load_onnx(cached, base=base)
        except AdapterError:
            notify(f"warning: {cached} is damaged; exporting again")
        else:  # the graph holds the base it was exported on: refused on it, as loaded
            check_base(bundle.manifest, SimpleNamespace(**predictor.meta["base"]),
                       allow_base_mismatch=allow_base_mismatch, notify=notify)
            os.utime(cached)  # recently used: kept longest (`_prune`)
            return predictor
    notify(f"exporting {adapter_dir} to ONNX once (cached in {cached.parent})")
    export_verified(bundle, cached, base=base, allow_base_mismatch=allow_base_mismatch,
                    notify=notify)
    _prune(cached.parent, keep=cached)
    return load_onnx(cached, base=base)


def _prune(cache: Path, keep: Path) -> None:
    """Remove all but the `CACHE_KEEP` most recently used graphs (each about the base's
    size), never `keep`."""
    graphs = sorted(cache.glob("*.onnx"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in [g for g in graphs if g != keep][CACHE_KEEP - 1:]:
        old.unlink(missing_ok=True)


def _onnxruntime():
    try:
        import onnxruntime
    except ImportError:
        raise ModelError("onnxruntime is not installed",
                         hint="pip install 'adapter-hub[onnx]'") from None
    return onnxruntime


def _tokenizer(recorded: dict, override: str | None):
    from hubcli.base.hashing import tokenizer_hash
    from hubcli.base.load import load_tokenizer
    from hubcli.base.ref import find_base, resolve_base

    ref = override or find_base(recorded["content_hash"]) or recorded["name"]
    tokenizer = load_tokenizer(resolve_base(ref)[1])
    if tokenizer_hash(tokenizer) != recorded["tokenizer_hash"]:
        raise ModelError(f"the tokenizer of base {ref!r} differs from the one the graph was "
                         f"exported with ({recorded['name']!r})",
                         hint="pass --base with the base the adapter was exported on")
    return tokenizer
