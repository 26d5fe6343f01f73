"""Constrained decoding of IOB tags: the most probable tag sequence that the scheme the model
learnt in allows (Viterbi over the tag lattice), instead of each word's most probable tag.

Greedy per-word decoding can put out sequences the scheme never has: in IOB1 a B-X after a word
that is not X, in IOB2 an I-X after a word that is not X. entity_spans() still reads them, but
each such tag is a guess (it opens an entity of its own or splits one); the lattice uses the
other tags' probabilities to choose the best sequence that is valid.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# The prefix a scheme allows only directly after a word of the same entity type.
_GUARDED = {"IOB1": "B", "IOB2": "I"}
CHUNK = 256  # sentences decoded together, of similar length so padding stays small


def transitions(labels: Sequence[str], scheme: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(start, step) boolean masks: start[j], a sequence may begin with labels[j]; step[i, j],
    labels[j] may directly follow labels[i]. A scheme other than IOB1 or IOB2 (None: not
    recorded) allows everything, so decoding is greedy."""
    start = np.ones(len(labels), dtype=bool)
    step = np.ones((len(labels), len(labels)), dtype=bool)
    guarded = _GUARDED.get(scheme or "")
    if guarded is None:
        return start, step
    kinds = np.array([label[2:] for label in labels])  # "" for O
    for j, label in enumerate(labels):
        if label.startswith(guarded + "-"):
            start[j] = False
            step[:, j] = kinds == kinds[j]
    return start, step


def viterbi(log_probs: np.ndarray, lengths: np.ndarray, start: np.ndarray,
            step: np.ndarray) -> np.ndarray:
    """The best label index at each position of each padded sequence: (N, T) from (N, T, L)
    log-probabilities and the N true lengths; positions past a sequence's end get 0. Every
    sequence must have a path the masks allow (in IOB1 and IOB2, O is allowed everywhere)."""
    n, width, num_labels = log_probs.shape
    if width == 0:
        return np.zeros((n, 0), dtype=np.intp)
    penalty = np.where(step, 0.0, -np.inf)
    score = log_probs[:, 0] + np.where(start, 0.0, -np.inf)
    back = np.zeros((n, width, num_labels), dtype=np.intp)
    for t in range(1, width):  # one vectorised step per position, over all sequences at once
        candidates = score[:, :, None] + penalty  # (sequence, previous label, label)
        back[:, t] = candidates.argmax(axis=1)
        moved = candidates.max(axis=1) + log_probs[:, t]
        score = np.where((t < lengths)[:, None], moved, score)
    rows = np.arange(n)
    path = np.zeros((n, width), dtype=np.intp)
    label = score.argmax(axis=1)
    for t in range(width - 1, -1, -1):
        path[:, t] = label
        label = np.where(t < lengths, back[rows, t, label], label)
    return np.where(np.arange(width) < lengths[:, None], path, 0)


def best_paths(log_probs: Sequence[np.ndarray], labels: Sequence[str],
               scheme: str | None) -> list[np.ndarray]:
    """viterbi() of each (words, labels) array under `scheme`'s masks, sentences of similar
    length decoded together."""
    start, step = transitions(labels, scheme)
    lengths = np.array([len(lp) for lp in log_probs], dtype=np.intp)
    order = np.argsort(lengths, kind="stable")
    paths: list[np.ndarray] = [np.zeros(0, dtype=np.intp)] * len(log_probs)
    for first in range(0, len(order), CHUNK):
        chunk = order[first:first + CHUNK]
        padded = np.zeros((len(chunk), int(lengths[chunk].max()), len(labels)))
        for row, i in enumerate(chunk):
            padded[row, :lengths[i]] = log_probs[i]
        for i, path in zip(chunk, viterbi(padded, lengths[chunk], start, step)):
            paths[i] = path[:lengths[i]]
    return paths
