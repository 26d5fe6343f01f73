"""Evaluate an adapter with its adapter modules removed from spans of layers.

Houlsby et al. (2019, Fig. 6) remove the adapters of every span [i, j] of layers from a trained
model, keeping everything else, and score it again: one layer costs little, all of them fall to
about the majority class, and the lower layers matter least. AdapterDrop (Rueckle et al. 2021)
turns the last finding into speed: skip the adapters of the k lowest layers at inference.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Callable

from hubcli.local.inference import Predictor, run_model

# AdapterDrop's speed is the median of this many passes per count: one pass's time is noise
# next to what skipping one adapter's layers saves on a frozen base that still runs them all
SPEED_ROUNDS = 5


@dataclass
class Ablation:
    """Scores of one adapter on one data set, with adapters removed from layer spans."""

    metric: str                          # the task's primary metric
    full: float                          # nothing removed
    majority: float | None               # always answering the most frequent class
    spans: list[list[float | None]]      # spans[i][j]: layers i..j removed (None below i)
    drop: list[dict] | None = None       # AdapterDrop: {"dropped": k, metric, "examples_per_s"}

    def to_json(self) -> dict:
        return asdict(self)


def majority_share(examples: list) -> float | None:
    """The accuracy of always answering the most frequent label (classification only)."""
    labels = [getattr(e, "label", None) for e in examples]
    if not labels or any(not isinstance(x, str) for x in labels):
        return None
    return Counter(labels).most_common(1)[0][1] / len(labels)


class _Scorer:
    """The examples encoded once, scored under any set of removed layers."""

    def __init__(self, predictor: Predictor, examples: list):
        self.p, self.examples = predictor, examples
        self.features = predictor.task.encode(examples, predictor.tokenizer, predictor.labels,
                                              predictor.max_length)

    def __call__(self, removed: range) -> tuple[float, float]:
        """(primary metric, examples per second) with the adapters of `removed` skipped."""
        p = self.p
        with p.model.without_adapters(removed):
            t0 = time.perf_counter()
            preds = run_model(p.model, p.task, self.features, self.examples, p.labels)
            seconds = time.perf_counter() - t0
        score = p.task.metrics(preds, self.examples, p.labels)[p.task.primary_metric]
        return score, len(self.examples) / seconds


def ablate(predictor: Predictor, examples: list, *, drop_lowest: int | None = None,
           progress: Callable[[str], None] = lambda _m: None) -> Ablation:
    """Score `predictor`'s adapter on `examples` with every layer span's adapters removed, and
    with the `drop_lowest` lowest layers' adapters skipped one count at a time.

    Raises:
        UsageError: the folder is a full fine-tune (it has no adapters to remove), or
            `drop_lowest` exceeds the base's layers.
    """
    from hubcli.errors import UsageError

    model = predictor.model
    if not hasattr(model, "without_adapters"):
        raise UsageError(f"{predictor.source} is a full fine-tune: it has no adapters to remove",
                         hint="ablate an adapter folder")
    n = model.num_layers
    if drop_lowest is not None and not 0 <= drop_lowest <= n:
        raise UsageError(f"--drop-lowest {drop_lowest}: the base has {n} layers",
                         hint=f"pass a count from 0 to {n}")
    score = _Scorer(predictor, examples)
    full = score(range(0))[0]
    spans: list[list[float | None]] = [[None] * n for _ in range(n)]
    total, done = n * (n + 1) // 2, 0
    for i in range(n):
        for j in range(i, n):
            spans[i][j] = round(score(range(i, j + 1))[0], 6)
            done += 1
            progress(f"span {done}/{total}: layers {i}-{j} removed: {spans[i][j]:.4f}")
    drop = None
    if drop_lowest is not None:
        counts = range(drop_lowest + 1)
        runs: dict[int, list[tuple[float, float]]] = {k: [] for k in counts}
        for _ in range(SPEED_ROUNDS):  # interleaved: a busy moment slows every count alike
            for k in counts:
                runs[k].append(score(range(k)))
        drop = []
        for k in counts:
            value, speed = runs[k][0][0], statistics.median(s for _, s in runs[k])
            drop.append({"dropped": k, predictor.task.primary_metric: round(value, 6),
                         "examples_per_s": round(speed, 1)})
            progress(f"lowest {k} layers skipped: {value:.4f} at {speed:.0f} examples/s "
                     f"(median of {SPEED_ROUNDS})")
    return Ablation(predictor.task.primary_metric, round(full, 6), majority_share(examples),
                    spans, drop)

