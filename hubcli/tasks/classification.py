"""Sentence (pair) classification: one softmax over the label set, cross-entropy loss."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hubcli.errors import DataError
from hubcli.tasks.metrics import classification_metrics
from hubcli.tasks.base import as_array, softmax, unknown_label
from hubcli.tasks.sentence import SentenceExample, SentenceTask

if TYPE_CHECKING:
    import torch


class Classification(SentenceTask):
    name = "classification"
    head_type = "sequence_classification"
    primary_metric = "accuracy"

    def label_names(self, examples: list[SentenceExample]) -> list[str]:
        return sorted({example.label for example in examples})

    def check_training_labels(self, labels: list[str], path: Path) -> None:
        """Two classes at least: with one, the head learns to answer it always (accuracy 1.0
        on any dev set of that class) and the adapter is useless.

        Raises:
            DataError: every example has the same label (names the file and the label).
        """
        if len(labels) == 1:
            raise DataError(f"every example has the label {labels[0]!r}; classification "
                            "needs two classes at least", path=str(path),
                            hint="add examples of the other classes (or check --label-column)")

    def num_outputs(self, labels: list[str]) -> int:
        return len(labels)

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        from torch.nn.functional import cross_entropy

        return cross_entropy(logits, batch["labels"])

    def decode(self, logits_per_feature: list, features: list[dict],
               examples: list[SentenceExample], labels: list[str]) -> list[dict]:
        """{"label", "score"}: the most probable label and its softmax probability."""
        predictions: list[dict] = [{} for _ in examples]
        for logits, feature in zip(logits_per_feature, features):
            probs = softmax(as_array(logits).reshape(-1))
            best = int(probs.argmax())
            predictions[feature["example_index"]] = {"label": labels[best],
                                                      "score": float(probs[best])}
        return predictions

    def metrics(self, predictions: list[dict], examples: list[SentenceExample],
                labels: list[str]) -> dict[str, float]:
        """accuracy and macro_f1."""
        return classification_metrics([example.label for example in examples],
                                      [prediction["label"] for prediction in predictions])

    def describe(self, pred: dict) -> str:
        return f"{pred['label']} ({pred['score']:.3f})"

    def _parse_label(self, raw: Any, path: Path, line: int) -> str:
        if isinstance(raw, str):
            return raw
        if isinstance(raw, (dict, list)):
            raise DataError(f"label {json.dumps(raw)} is not a string or number", path=str(path),
                            line=line)
        return json.dumps(raw)  # a JSONL number or boolean, spelled as in the file

    def _target(self, example: SentenceExample, labels: list[str]) -> int:
        if example.label not in labels:
            raise unknown_label(example.label, labels, what="label", path=example.path,
                                line=example.line)
        return labels.index(example.label)
