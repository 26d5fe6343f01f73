"""Evaluation metrics of the four tasks, each returning a plain dict of floats.

Written here rather than taken from scikit-learn, scipy or seqeval so the client needs only
numpy; each function states which reference behaviour it reproduces. Accuracy-, F1- and
EM-like values are fractions in [0, 1], never percentages.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np

Span = tuple[str, int, int]  # (entity type, first word, one past the last word)


def classification_metrics(gold: Sequence[str], pred: Sequence[str]) -> dict[str, float]:
    """Accuracy and macro-F1, averaged over every label seen in `gold` or `pred`.

    Same as scikit-learn's `f1_score(average="macro", zero_division=0)`.

    Raises:
        ValueError: the sequences differ in length or are empty.
    """
    _check_pair(gold, pred)
    f1s = []
    for label in sorted(set(gold) | set(pred)):
        tp = sum(g == label and p == label for g, p in zip(gold, pred))
        f1s.append(_f1(tp, sum(p == label for p in pred), sum(g == label for g in gold)))
    accuracy = sum(g == p for g, p in zip(gold, pred)) / len(gold)
    return {"accuracy": accuracy, "macro_f1": sum(f1s) / len(f1s)}


def regression_metrics(gold: Sequence[float], pred: Sequence[float]) -> dict[str, float]:
    """Pearson and Spearman correlation (Spearman: Pearson of ranks, ties get their mean rank).

    A constant input has no defined correlation; it scores 0.0 rather than NaN so that choosing
    the best epoch by comparing numbers keeps working.

    Raises:
        ValueError: the sequences differ in length or are empty.
    """
    _check_pair(gold, pred)
    x, y = np.asarray(gold, dtype=np.float64), np.asarray(pred, dtype=np.float64)
    return {"pearson": _pearson(x, y), "spearman": _pearson(average_ranks(x), average_ranks(y))}


def average_ranks(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """1-based ranks; tied values all get the mean of the ranks they span (scipy's "average")."""
    x = np.asarray(values, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    ordered = x[order]
    is_first = np.r_[True, ordered[1:] != ordered[:-1]]
    firsts = np.flatnonzero(is_first)
    sizes = np.diff(np.r_[firsts, len(x)])
    mean_rank = firsts + (sizes + 1) / 2  # ranks firsts+1 .. firsts+sizes, averaged
    ranks = np.empty(len(x))
    ranks[order] = mean_rank[np.cumsum(is_first) - 1]
    return ranks


def entity_spans(tags: Sequence[str]) -> list[Span]:
    """Entity spans of one IOB1 or IOB2 tag sequence, as conlleval and seqeval's default mode
    read them.

    An entity starts at `B-X`, or at `I-X` not preceded by a tag of type X; it runs over the
    following `I-X` tags. Tags are "O", "B-TYPE" or "I-TYPE". This reads both schemes alike, so
    IOB1 gold and IOB2 predictions score against each other.
    """
    spans: list[Span] = []
    kind: str | None = None
    start = 0
    for i, tag in enumerate([*tags, "O"]):
        prefix, _, tag_kind = tag.partition("-")
        continues = prefix == "I" and tag_kind == kind
        if kind is not None and not continues:
            spans.append((kind, start, i))
            kind = None
        if prefix in ("B", "I") and not continues:
            kind, start = tag_kind, i
    return spans


def entity_metrics(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]
                   ) -> dict[str, float]:
    """Micro-averaged entity precision, recall and F1 with exact span and type match (seqeval).

    Raises:
        ValueError: the sequences differ in length or are empty.
    """
    _check_pair(gold, pred)
    gold_set = {(i, *s) for i, tags in enumerate(gold) for s in entity_spans(tags)}
    pred_set = {(i, *s) for i, tags in enumerate(pred) for s in entity_spans(tags)}
    tp = len(gold_set & pred_set)
    return {"precision": tp / len(pred_set) if pred_set else 0.0,
            "recall": tp / len(gold_set) if gold_set else 0.0,
            "f1": _f1(tp, len(pred_set), len(gold_set))}


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 normalisation: lowercase, drop punctuation, drop a/an/the, squeeze spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def squad_metrics(pred: Sequence[str], gold: Sequence[Sequence[str]]) -> dict[str, float]:
    """Exact match and token F1 of each answer against its best gold answer (SQuAD v1.1 script).

    Raises:
        ValueError: the sequences differ in length or are empty, or an example has no gold answer.
    """
    _check_pair(gold, pred)
    if any(not answers for answers in gold):
        raise ValueError("every example needs at least one gold answer")
    em = sum(max(normalize_answer(p) == normalize_answer(g) for g in answers)
             for p, answers in zip(pred, gold))
    f1 = sum(max(_answer_f1(p, g) for g in answers) for p, answers in zip(pred, gold))
    return {"exact_match": em / len(gold), "f1": f1 / len(gold)}


_PUNCTUATION = frozenset(string.punctuation)


def _answer_f1(pred: str, gold: str) -> float:
    pred_tokens, gold_tokens = normalize_answer(pred).split(), normalize_answer(gold).split()
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    return _f1(common, len(pred_tokens), len(gold_tokens))


def _f1(tp: int, n_pred: int, n_gold: int) -> float:
    """F1 from counts; 2tp/(n_pred+n_gold) is the harmonic mean of precision and recall."""
    return 2 * tp / (n_pred + n_gold) if tp else 0.0


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    # Tested on the raw values: x - x.mean() of a constant can leave rounding noise, not zeros.
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return 0.0
    dx, dy = x - x.mean(), y - y.mean()
    return float(dx @ dy / np.sqrt((dx @ dx) * (dy @ dy)))


def _check_pair(gold: Sequence, pred: Sequence) -> None:
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold values but {len(pred)} predictions")
    if not gold:
        raise ValueError("no examples to score")
