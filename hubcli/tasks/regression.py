"""Sentence (pair) regression: one number per input, mean squared error loss."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hubcli.errors import DataError
from hubcli.tasks.metrics import regression_metrics
from hubcli.tasks.base import as_array
from hubcli.tasks.sentence import SentenceExample, SentenceTask

if TYPE_CHECKING:
    import torch


class Regression(SentenceTask):
    name = "regression"
    head_type = "regression"
    primary_metric = "pearson"

    def label_names(self, examples: list[SentenceExample]) -> list[str]:
        return []

    def num_outputs(self, labels: list[str]) -> int:
        return 1

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        from torch.nn.functional import mse_loss

        return mse_loss(logits.view(-1), batch["labels"])

    def decode(self, logits_per_feature: list, features: list[dict],
               examples: list[SentenceExample], labels: list[str]) -> list[dict]:
        """{"score"}: the predicted number."""
        predictions: list[dict] = [{} for _ in examples]
        for logits, feature in zip(logits_per_feature, features):
            score = float(as_array(logits).reshape(-1)[0])
            predictions[feature["example_index"]] = {"score": score}
        return predictions

    def metrics(self, predictions: list[dict], examples: list[SentenceExample],
                labels: list[str]) -> dict[str, float]:
        """pearson and spearman."""
        return regression_metrics([float(example.label) for example in examples],
                                  [prediction["score"] for prediction in predictions])

    def describe(self, pred: dict) -> str:
        return f"{pred['score']:.4f}"

    def _parse_label(self, raw: Any, path: Path, line: int) -> float:
        try:
            value = math.nan if isinstance(raw, bool) else float(raw)
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value):
            raise DataError(f"label {raw!r} is not a finite number", path=str(path), line=line,
                            hint="regression needs numeric labels; use --task classification "
                                 "for categories")
        return value

    def _target(self, example: SentenceExample, labels: list[str]) -> float:
        return float(example.label)
