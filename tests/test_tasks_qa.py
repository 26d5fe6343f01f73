"""Question answering: SQuAD reading, answer span mapping with doc stride, decoding, metrics."""

import json

import numpy as np
import pytest
import torch

from hubcli.errors import DataError, UsageError
from hubcli.tasks import get_task
from hubcli.tasks.qa import MAX_ANSWER_TOKENS
from hubcli.tasks.squad import Answer, QAExample

CONTEXT = ("The museum opened in 1901. " * 5 + "Its founder was Maria Lindqvist, a painter. "
           + "Visitors come every day. " * 5)
ANSWER = Answer("Maria Lindqvist", CONTEXT.index("Maria Lindqvist"))


@pytest.fixture
def qa():
    return get_task("qa")


def squad_file(tmp_path, document, name="d.json"):
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else json.dumps(document, indent=1))
    return path


def squad(qas, context="Paris is in France."):
    return {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": qas}]}]}


def error_text(call) -> tuple[str, str | None]:
    with pytest.raises(DataError) as info:
        call()
    return str(info.value), info.value.hint


def answer_logits(feature, first: int, last: int, width: int | None = None) -> np.ndarray:
    logits = np.zeros((width or len(feature["input_ids"]), 2))
    logits[first, 0] = logits[last, 1] = 8.0
    return logits


def test_read_squad(tmp_path, qa):
    path = squad_file(tmp_path, squad([
        {"id": "q1", "question": "Where is Paris?",
         "answers": [{"text": "France", "answer_start": 12}, {"text": "France.",
                                                               "answer_start": 12}]}]))
    [example] = qa.read(path)
    assert example == QAExample("Where is Paris?", "Paris is in France.",
                                (Answer("France", 12), Answer("France.", 12)), "q1", str(path))


def test_squad_not_json(tmp_path, qa):
    path = squad_file(tmp_path, '{"data": [\n  {"paragraphs": }\n]}')
    assert error_text(lambda: qa.read(path))[0] == (
        f"{path}:2: not valid JSON: Expecting value at column 18")


def test_squad_missing_field_names_where(tmp_path, qa):
    path = squad_file(tmp_path, squad([{"id": "q1", "answers": []}]))
    assert error_text(lambda: qa.read(path)) == (
        f"{path}: data[0].paragraphs[0].qas[0].question is missing",
        "expected SQuAD v1.1 JSON: data[].paragraphs[].qas[]")
    path = squad_file(tmp_path, {"data": {"paragraphs": []}}, "e.json")
    assert error_text(lambda: qa.read(path))[0] == f"{path}: data is dict, expected list"


def test_squad_answer_not_at_its_offset(tmp_path, qa):
    path = squad_file(tmp_path, squad([{"question": "q", "answers": [
        {"text": "France", "answer_start": 11}]}]))
    assert error_text(lambda: qa.read(path)) == (
        f"{path}: data[0].paragraphs[0].qas[0].answers[0]: answer 'France' is not at "
        "answer_start 11 of the context",
        "answer_start is the character offset of the answer text in the context")


def test_squad_v2_unanswerable(tmp_path, qa):
    path = squad_file(tmp_path, squad([{"question": "q", "answers": [], "is_impossible": True}]))
    assert error_text(lambda: qa.read(path)) == (
        f"{path}: data[0].paragraphs[0].qas[0]: no answers",
        "unanswerable (SQuAD v2) questions are not supported")


def test_span_maps_to_answer_tokens(tokenizer, qa):
    example = QAExample("Where is Paris?", "Paris is in northern France.",
                        (Answer("northern France", 12),))
    [feature] = qa.encode([example], tokenizer, [], 64)
    tokens = tokenizer.convert_ids_to_tokens(feature["input_ids"])
    assert tokens[feature["start_positions"]:feature["end_positions"] + 1] == ["northern",
                                                                               "france"]
    assert feature["offsets"][:6] == [None] * 6  # [CLS] where is paris ? [SEP]
    assert feature["offsets"][6] == [0, 5] and feature["offsets"][-1] is None


def test_doc_stride_windows(tokenizer, qa):
    example = QAExample("Who founded the museum?", CONTEXT, (ANSWER,))
    features = qa.encode([example], tokenizer, [], 40)
    assert len(features) == 3 and all(len(f["input_ids"]) <= 40 for f in features)
    assert {f["example_index"] for f in features} == {0}
    # neighbouring windows share max_length // 4 = 10 context tokens
    context_tokens = [[i for i, o in zip(f["input_ids"], f["offsets"]) if o] for f in features]
    assert context_tokens[0][-10:] == context_tokens[1][:10]
    positions = [(f["start_positions"], f["end_positions"]) for f in features]
    assert positions[0] == (0, 0) and positions[2] == (0, 0)  # answer not (wholly) inside
    start, end = positions[1]
    assert tokenizer.decode(features[1]["input_ids"][start:end + 1]) == "maria lindqvist"


def test_explicit_doc_stride(tokenizer):
    qa = type(get_task("qa"))(doc_stride=4)
    features = qa.encode([QAExample("Who?", CONTEXT, (ANSWER,))], tokenizer, [], 40)
    context_tokens = [[i for i, o in zip(f["input_ids"], f["offsets"]) if o] for f in features]
    assert context_tokens[0][-4:] == context_tokens[1][:4]


def test_long_question_is_clipped_to_leave_room(tokenizer, qa):
    example = QAExample("why " * 100, CONTEXT, (ANSWER,))
    features = qa.encode([example], tokenizer, [], 32)
    assert all(len(f["input_ids"]) <= 32 for f in features)
    assert sum(1 for o in features[0]["offsets"] if o) >= 32 - 3 - 16


def test_decode_finds_the_answer_in_the_right_window(tokenizer, qa):
    example = QAExample("Who founded the museum?", CONTEXT, (ANSWER,))
    features = qa.encode([example], tokenizer, [], 40)
    logits = [answer_logits(f, f["start_positions"], f["end_positions"]) for f in features]
    [prediction] = qa.decode([torch.tensor(x) for x in logits], features, [example], [])
    assert prediction["answer"] == "Maria Lindqvist"
    assert (prediction["start"], prediction["end"]) == (ANSWER.start, ANSWER.start + 15)
    assert 0.5 < prediction["score"] <= 1.0
    assert qa.describe(prediction) == (
        f"'Maria Lindqvist' ({ANSWER.start}-{ANSWER.start + 15}, {prediction['score']:.3f})")
    assert qa.metrics([prediction], [example], []) == {"exact_match": 1.0, "f1": 1.0}


@pytest.mark.parametrize("start, end, because", [
    (0, MAX_ANSWER_TOKENS, "31 tokens long"),
    (10, 5, "ends before it starts"),
    (None, None, "in the question"),
])
def test_decode_skips_invalid_spans(tokenizer, qa, start, end, because):
    example = QAExample("Where?", "one two three four five six seven eight nine ten " * 5)
    [feature] = qa.encode([example], tokenizer, [], 128, with_targets=False)
    assert "start_positions" not in feature
    context = [i for i, o in enumerate(feature["offsets"]) if o]
    logits = np.zeros((len(feature["input_ids"]), 2))
    # the most likely span is invalid; the valid one holds (k, k+2): "one two three"
    first = context[start] if start is not None else 1
    last = context[end] if end is not None else 1
    logits[first, 0], logits[last, 1] = 9.0, 9.0
    k = start if start is not None else 20
    logits[context[k], 0] = max(logits[context[k], 0], 3.0)
    logits[context[k + 2], 1] = 3.0
    [prediction] = qa.decode([logits], [feature], [example], [])
    assert prediction["answer"] == "one two three", because
    assert prediction["start"] == feature["offsets"][context[k]][0]


def test_decode_accepts_padded_logits(tokenizer, qa):
    example = QAExample("Where is Paris?", "Paris is in France.")
    [feature] = qa.encode([example], tokenizer, [], 64, with_targets=False)
    france = feature["offsets"].index([12, 18])
    [prediction] = qa.decode([answer_logits(feature, france, france, width=64)], [feature],
                             [example], [])
    assert (prediction["answer"], prediction["start"], prediction["end"]) == ("France", 12, 18)


def test_collate_and_loss(tokenizer, qa):
    examples = [QAExample("Where is Paris?", "Paris is in France.", (Answer("France", 12),)),
                QAExample("Who?", "Anna.", (Answer("Anna", 0),))]
    features = qa.encode(examples, tokenizer, [], 64)
    batch = qa.collate(features)
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "start_positions",
                          "end_positions"}
    assert batch["start_positions"].tolist() == [6 + 3, 4] and batch["end_positions"].tolist() \
        == [9, 4]
    # padding cannot take probability: huge logits there leave the loss unchanged
    logits = torch.zeros(*batch["input_ids"].shape, 2)
    before = qa.loss(logits, batch).item()
    logits[1, len(features[1]["input_ids"]):] = 50.0
    assert qa.loss(logits, batch).item() == pytest.approx(before)


def test_parse_input_needs_a_tab(qa):
    assert qa.parse_input("Who?\tAnna did.") == QAExample("Who?", "Anna did.")
    with pytest.raises(UsageError, match="question answering needs 'question<TAB>context'"):
        qa.parse_input("Who? Anna did.")


def test_task_facts(qa):
    assert (qa.head_type, qa.primary_metric, qa.num_outputs([]), qa.formats) == (
        "question_answering", "f1", 2, ("squad",))
