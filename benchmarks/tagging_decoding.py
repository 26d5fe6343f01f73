#!/usr/bin/env python3
"""Entity F1 of one trained tagging adapter (or full fine-tune) decoded two ways from the same
logits: greedy per word, and Viterbi over the lattice of the scheme its head records (IOB1 for
hub's). Also counts the sentences (and words) whose tags the two ways differ. One JSON line.

    python benchmarks/tagging_decoding.py ADAPTER_DIR DEV.conll
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class _Logits:
    """Stands in for the task in run_model: batches as the task does, returns the logits."""

    def __init__(self, task) -> None:
        self.collate = task.collate

    @staticmethod
    def decode(logits, *_rest) -> list:
        return logits


def main(adapter: str, dev: str) -> None:
    from hubcli.local.inference import load_predictor, run_model

    p = load_predictor(Path(adapter), allow_unsigned=True)
    examples = p.task.read(Path(dev))
    feats = p.task.encode(examples, p.tokenizer, p.labels, p.max_length, with_targets=False)
    logits = run_model(p.model, _Logits(p.task), feats, examples, p.labels)
    scheme = p.task.label_scheme
    out: dict = {"adapter": adapter, "scheme": scheme, "sentences": len(examples)}
    tags = {}
    for name, used in (("greedy", None), ("viterbi", scheme)):
        p.task.label_scheme = used
        preds = p.task.decode(logits, feats, examples, p.labels)
        out[name] = {k: round(v, 4) for k, v in p.task.metrics(preds, examples, p.labels).items()}
        tags[name] = [pred["tags"] for pred in preds]
    pairs = list(zip(tags["greedy"], tags["viterbi"]))
    out["sentences_differing"] = sum(g != v for g, v in pairs)
    out["words_differing"] = sum(a != b for g, v in pairs for a, b in zip(g, v))
    print(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:3])
