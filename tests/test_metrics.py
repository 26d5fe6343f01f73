import math

import pytest

from hubcli.tasks.metrics import (average_ranks, classification_metrics, entity_metrics, entity_spans,
                            normalize_answer, regression_metrics, squad_metrics)


def test_classification_accuracy_and_macro_f1():
    # per label F1: a = 2*1/(2+2) = 1/2, b = 2*1/(2+1) = 2/3, c = 0 (never predicted)
    m = classification_metrics(["a", "a", "b", "c"], ["a", "b", "b", "a"])
    assert m == {"accuracy": 0.5, "macro_f1": pytest.approx((1 / 2 + 2 / 3 + 0) / 3)}


def test_macro_f1_counts_labels_only_predicted():
    # "x" appears only in predictions: it scores 0 and is averaged in, as scikit-learn does
    m = classification_metrics(["a", "a"], ["a", "x"])
    assert m["macro_f1"] == pytest.approx((2 / 3 + 0) / 2)


def test_pearson_by_hand():
    # dx = -1.5 -.5 .5 1.5, dy = -1.75 .25 1.25 .25: sum dx*dy = 3.5, sxx = 5, syy = 4.75
    m = regression_metrics([1, 2, 3, 4], [2, 4, 5, 4])
    assert m["pearson"] == pytest.approx(3.5 / math.sqrt(5 * 4.75))


def test_spearman_with_ties_uses_average_ranks():
    # ranks x = 1 2.5 2.5 4, y = 1 3 2 4: sum dx*dy = 4.5, sxx = 4.5, syy = 5
    m = regression_metrics([1, 2, 2, 3], [1, 3, 2, 4])
    assert m["spearman"] == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    assert m["spearman"] == pytest.approx(0.9486832980505138)  # scipy.stats.spearmanr


def test_average_ranks_ties():
    assert average_ranks([10, 20, 10, 30, 20, 20]).tolist() == [1.5, 4, 1.5, 6, 4, 4]


def test_constant_input_correlates_zero_not_nan():
    assert regression_metrics([0.1, 0.1, 0.1], [1, 2, 3]) == {"pearson": 0.0, "spearman": 0.0}


def test_entity_spans_read_like_conlleval():
    assert entity_spans(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 2), ("LOC", 3, 4)]
    assert entity_spans(["I-PER", "I-PER", "B-PER"]) == [("PER", 0, 2), ("PER", 2, 3)]
    assert entity_spans(["B-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 1), ("LOC", 1, 3)]
    assert entity_spans(["O", "O"]) == []


def test_entity_metrics_seqeval_readme_example():
    gold = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    pred = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    assert entity_metrics(gold, pred) == {"precision": 0.5, "recall": 0.5, "f1": 0.5}


def test_entity_metrics_partial_span_is_a_miss():
    gold = [["B-ORG", "I-ORG", "O", "B-LOC"]]
    pred = [["B-ORG", "O", "O", "B-LOC"]]  # ORG cut short: wrong, LOC right
    assert entity_metrics(gold, pred) == {"precision": 0.5, "recall": 0.5, "f1": 0.5}
    pred = [["B-ORG", "I-ORG", "O", "O"]]
    assert entity_metrics(gold, pred) == {"precision": 1.0, "recall": 0.5,
                                          "f1": pytest.approx(2 / 3)}


def test_entity_metrics_nothing_predicted():
    assert entity_metrics([["B-PER"]], [["O"]]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_squad_normalisation():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("An apple, a PEAR and the plum") == "apple pear and plum"
    assert normalize_answer("theatre") == "theatre"


def test_squad_em_and_f1_take_the_best_gold_answer():
    # 1: "cat sat" vs "cat sat down": p = 1, r = 2/3, F1 = 0.8, no exact match
    # 2: "Paris" vs "paris.": exact after normalisation
    m = squad_metrics(["the cat sat", "Paris"], [["a cat sat down", "dog"], ["London", "paris."]])
    assert m == {"exact_match": 0.5, "f1": pytest.approx((0.8 + 1.0) / 2)}


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="2 gold values but 1 predictions"):
        classification_metrics(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="no examples"):
        entity_metrics([], [])
