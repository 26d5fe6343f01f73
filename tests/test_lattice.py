"""Constrained (Viterbi) decoding over IOB1 and IOB2 tag lattices, on hand-made probabilities."""

import numpy as np
import pytest

from hubcli.tasks import lattice
from hubcli.tasks.lattice import best_paths, transitions, viterbi

LABELS = ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
O, B_LOC, B_PER, I_LOC, I_PER = range(5)


def decode(probs, scheme):
    log_probs = np.log(np.asarray(probs, dtype=float))[None]
    start, step = transitions(LABELS, scheme)
    return viterbi(log_probs, np.array([log_probs.shape[1]]), start, step)[0].tolist()


def test_iob1_masks_allow_b_only_directly_after_the_same_type():
    start, step = transitions(LABELS, "IOB1")
    assert start.tolist() == [True, False, False, True, True]
    assert step[:, B_LOC].tolist() == [False, True, False, True, False]
    assert step[:, B_PER].tolist() == [False, False, True, False, True]
    assert step[:, [O, I_LOC, I_PER]].all()


def test_iob2_masks_allow_i_only_after_the_same_type():
    start, step = transitions(LABELS, "IOB2")
    assert start.tolist() == [True, True, True, False, False]
    assert step[:, I_LOC].tolist() == [False, True, False, True, False]
    assert step[:, I_PER].tolist() == [False, False, True, False, True]
    assert step[:, [O, B_LOC, B_PER]].all()


@pytest.mark.parametrize("scheme", [None, "BIOES"])
def test_no_known_scheme_allows_everything(scheme):
    start, step = transitions(LABELS, scheme)
    assert start.all() and step.all()


# word 1 is most likely B-LOC, but in IOB1 a B-LOC cannot follow a PER word
IOB1_CASE = [[0.30, 0.02, 0.02, 0.06, 0.60],
             [0.10, 0.50, 0.02, 0.36, 0.02],
             [0.80, 0.05, 0.05, 0.05, 0.05]]


def test_iob1_viterbi_repairs_what_greedy_gets_wrong():
    assert decode(IOB1_CASE, None) == [I_PER, B_LOC, O]  # greedy: invalid in IOB1
    # best valid: I-PER I-LOC O (0.6 * 0.36 * 0.8 = 0.1728, against 0.6 * 0.1 * 0.8 with O)
    assert decode(IOB1_CASE, "IOB1") == [I_PER, I_LOC, O]


def test_viterbi_may_change_an_earlier_word():
    # a confident B-LOC after a word torn between I-PER (0.40) and I-LOC (0.35):
    # I-LOC B-LOC scores 0.35 * 0.9, I-PER then anything but B-LOC at most 0.40 * 0.04
    probs = [[0.15, 0.05, 0.05, 0.35, 0.40],
             [0.04, 0.90, 0.02, 0.02, 0.02]]
    assert decode(probs, None) == [I_PER, B_LOC]
    assert decode(probs, "IOB1") == [I_LOC, B_LOC]


def test_iob2_viterbi_never_starts_with_i_nor_puts_i_after_another_type():
    probs = [[0.30, 0.05, 0.20, 0.05, 0.40],  # greedy I-PER at the start
             [0.05, 0.10, 0.05, 0.60, 0.20],  # greedy I-LOC after a PER word
             [0.90, 0.02, 0.02, 0.04, 0.02]]
    assert decode(probs, None) == [I_PER, I_LOC, O]
    # valid paths: B-PER I-PER O = 0.2 * 0.2 * 0.9 = 0.036 beats O B-LOC O = 0.3 * 0.1 * 0.9
    # and B-PER B-LOC O = 0.2 * 0.1 * 0.9
    assert decode(probs, "IOB2") == [B_PER, I_PER, O]


def test_padded_sequences_decode_as_they_would_alone():
    rng = np.random.default_rng(0)
    long_ = np.log(rng.dirichlet(np.ones(5), size=6))
    short = np.log(np.asarray(IOB1_CASE))
    padded = np.zeros((2, 6, 5))
    padded[0], padded[1, :3] = long_, short
    padded[1, 3:] = np.log(np.array([0.01, 0.96, 0.01, 0.01, 0.01]))  # padding must not count
    start, step = transitions(LABELS, "IOB1")
    both = viterbi(padded, np.array([6, 3]), start, step)
    alone = viterbi(long_[None], np.array([6]), start, step)[0]
    assert both[0].tolist() == alone.tolist()
    assert both[1].tolist() == [I_PER, I_LOC, O, 0, 0, 0]


def test_best_paths_keeps_sentence_order_across_chunks(monkeypatch):
    monkeypatch.setattr(lattice, "CHUNK", 2)
    rng = np.random.default_rng(1)
    sentences = [np.log(rng.dirichlet(np.ones(5), size=n)) for n in (4, 0, 7, 1, 3)]
    start, step = transitions(LABELS, "IOB1")
    expected = [viterbi(s[None], np.array([len(s)]), start, step)[0].tolist() for s in sentences]
    assert [p.tolist() for p in best_paths(sentences, LABELS, "IOB1")] == expected
    assert [len(p) for p in expected] == [4, 0, 7, 1, 3]
