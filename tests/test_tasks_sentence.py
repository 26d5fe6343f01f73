"""Classification and regression: CSV/TSV/JSONL readers, their errors, encoding, decoding."""

import math

import numpy as np
import pytest
import torch

from hubcli.errors import DataError, UsageError
from hubcli.tasks import get_task
from hubcli.tasks.base import Columns
from hubcli.tasks.sentence import SentenceExample


def write(tmp_path, name, text):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def error_text(call) -> tuple[str, str | None]:
    with pytest.raises(DataError) as info:
        call()
    return str(info.value), info.value.hint


@pytest.fixture
def cls():
    return get_task("classification")


@pytest.fixture
def reg():
    return get_task("regression")


# --- reading -------------------------------------------------------------------------------

def test_csv_defaults_quotes_and_multiline_records(tmp_path, cls):
    path = write(tmp_path, "d.csv",
                 'Sentence,Label\n"good, really",pos\n\n"two\nlines",neg\nplain,pos\n')
    examples = cls.read(path)
    assert [(e.text, e.label, e.line) for e in examples] == [
        ("good, really", "pos", 2), ("two\nlines", "neg", 4), ("plain", "pos", 6)]
    assert examples[0].path == str(path) and examples[0].pair is None


def test_tsv_keeps_quotes_and_finds_the_pair_column(tmp_path, cls):
    path = write(tmp_path, "d.tsv", 'sentence1\tsentence2\tlabel\nhe said "hi"\tyes\t1\n')
    [example] = cls.read(path)
    assert (example.text, example.pair, example.label) == ('he said "hi"', "yes", "1")


def test_explicit_columns_match_case_insensitively(tmp_path, reg):
    path = write(tmp_path, "d.csv", "A,B,Rating\nx,y,3.5\n")
    [example] = reg.read(path, columns=Columns(text="a", pair="B", label="RATING"))
    assert (example.text, example.pair, example.label) == ("x", "y", 3.5)


def test_jsonl_labels_keep_their_json_spelling(tmp_path, cls):
    path = write(tmp_path, "d.jsonl",
                 '{"text": "a", "label": 1}\n\n{"text": "b", "label": true}\n'
                 '{"text": "c\u2028d", "label": "x"}\n')
    examples = cls.read(path)
    assert [(e.text, e.label, e.line) for e in examples] == [
        ("a", "1", 1), ("b", "true", 3), ("c\u2028d", "x", 4)]
    assert cls.label_names(examples) == ["1", "true", "x"]


def test_format_from_flag_overrides_extension(tmp_path, cls):
    path = write(tmp_path, "d.txt", "text\tlabel\na,b\tpos\n")
    assert cls.read(path, fmt="tsv")[0].text == "a,b"


def test_unknown_extension(tmp_path, cls):
    path = write(tmp_path, "d.dat", "text,label\na,pos\n")
    assert error_text(lambda: cls.read(path)) == (
        f"{path}: cannot tell the format from the extension '.dat'",
        "pass --format csv|tsv|jsonl")


def test_format_of_another_task_is_a_usage_error(tmp_path, cls):
    with pytest.raises(UsageError, match="format 'conll' does not apply to task "
                                         "'classification'"):
        cls.read(tmp_path / "d.csv", fmt="conll")


def test_missing_file(tmp_path, cls):
    path = tmp_path / "nope.csv"
    assert error_text(lambda: cls.read(path))[0] == f"{path}: file not found"


def test_empty_file(tmp_path, cls):
    path = write(tmp_path, "d.csv", "\n  \n")
    assert error_text(lambda: cls.read(path))[0] == f"{path}: file is empty"


def test_header_only(tmp_path, cls):
    path = write(tmp_path, "d.csv", "text,label\n")
    assert error_text(lambda: cls.read(path))[0] == f"{path}:1: no examples after the header"


def test_no_default_label_column(tmp_path, cls):
    path = write(tmp_path, "d.csv", "sentence,rating\na,1\n")
    assert error_text(lambda: cls.read(path)) == (
        f"{path}:1: no label column (looked for label, labels, score); "
        "columns are: sentence, rating",
        "pass --label-column rating")


def test_named_column_missing(tmp_path, cls):
    path = write(tmp_path, "d.csv", "sentence,score,source\na,1,web\n")
    assert error_text(lambda: cls.read(path, columns=Columns(label="label"))) == (
        f"{path}:1: column 'label' not found; columns are: sentence, score, source",
        "pass --label-column with one of: score, source")


def test_no_text_column(tmp_path, cls):
    path = write(tmp_path, "d.csv", "body,label\na,pos\n")
    message, hint = error_text(lambda: cls.read(path))
    assert message == (f"{path}:1: no text column (looked for sentence, text, sentence1, "
                       "question, question1, premise, review, content); columns are: body, label")
    assert hint == "pass --text-column with one of: body, label"


def test_wrong_number_of_fields_names_the_record_line(tmp_path, cls):
    path = write(tmp_path, "d.csv", 'text,label\n"multi\nline",pos\na,b,c\n')
    assert error_text(lambda: cls.read(path)) == (
        f"{path}:4: expected 2 fields like the header, found 3",
        "put double quotes around fields that hold commas, quotes or line breaks")


def test_tsv_with_a_stray_tab(tmp_path, cls):
    path = write(tmp_path, "d.tsv", "text\tlabel\na\tpos\nb\tc\tneg\n")
    assert error_text(lambda: cls.read(path))[0] == (
        f"{path}:3: expected 2 fields like the header, found 3")


def test_bad_csv_quoting(tmp_path, cls):
    path = write(tmp_path, "d.csv", 'text,label\nok,pos\n"bad"x,neg\n')
    assert error_text(lambda: cls.read(path))[0] == (
        f"{path}:3: malformed CSV: ',' expected after '\"'")


def test_malformed_jsonl_line(tmp_path, cls):
    path = write(tmp_path, "d.jsonl", '{"text": "a", "label": "x"}\n{"text": "b" "label": 1}\n')
    assert error_text(lambda: cls.read(path)) == (
        f"{path}:2: not valid JSON: Expecting ',' delimiter at column 14",
        "JSONL needs one JSON object per line")


def test_jsonl_line_that_is_not_an_object(tmp_path, cls):
    path = write(tmp_path, "d.jsonl", '{"text": "a", "label": "x"}\n["b", 1]\n')
    assert error_text(lambda: cls.read(path))[0] == (
        f"{path}:2: expected a JSON object, found list")


def test_jsonl_missing_key_and_wrong_type(tmp_path, cls):
    path = write(tmp_path, "d.jsonl", '{"text": "a", "label": "x"}\n{"text": "b"}\n')
    assert error_text(lambda: cls.read(path))[0] == f"{path}:2: key 'label' missing"
    path = write(tmp_path, "e.jsonl", '{"text": "a", "label": "x"}\n{"text": 5, "label": "y"}\n')
    assert error_text(lambda: cls.read(path))[0] == f"{path}:2: 'text' is 5, not a string"


def test_empty_label(tmp_path, cls):
    path = write(tmp_path, "d.csv", "text,label\na,pos\nb, \n")
    assert error_text(lambda: cls.read(path)) == (f"{path}:3: empty 'label'",
                                                   "every example needs a label")


def test_not_utf8_names_the_line(tmp_path, cls):
    path = write(tmp_path, "d.csv", b"text,label\nok,pos\ncaf\xe9,neg\n")
    assert error_text(lambda: cls.read(path)) == (f"{path}:3: not UTF-8 text (byte 0xe9)",
                                                   "save the file as UTF-8")


@pytest.mark.parametrize("value", ["high", "nan", "inf", ""])
def test_regression_label_must_be_a_finite_number(tmp_path, reg, value):
    path = write(tmp_path, "d.csv", f"text,score\na,1.5\nb,{value or chr(34) * 2}\n")
    message, hint = error_text(lambda: reg.read(path))
    expected = f"{path}:3: empty 'score'" if not value else \
        f"{path}:3: label {value!r} is not a finite number"
    assert message == expected
    if value:
        assert hint == ("regression needs numeric labels; use --task classification "
                        "for categories")


def test_regression_jsonl_boolean_is_not_a_number(tmp_path, reg):
    path = write(tmp_path, "d.jsonl", '{"text": "a", "score": true}\n')
    assert error_text(lambda: reg.read(path))[0] == f"{path}:1: label True is not a finite number"


# --- encoding, batching, loss ----------------------------------------------------------------

def test_encode_classification(tokenizer, cls):
    examples = [SentenceExample("a good film", label="pos"),
                SentenceExample("bad", "really bad", label="neg")]
    features = cls.encode(examples, tokenizer, ["neg", "pos"], 16)
    assert [f["labels"] for f in features] == [1, 0]
    assert [f["example_index"] for f in features] == [0, 1]
    assert tokenizer.convert_ids_to_tokens(features[1]["input_ids"]) == [
        "[CLS]", "bad", "[SEP]", "really", "bad", "[SEP]"]
    assert features[1]["token_type_ids"] == [0, 0, 0, 1, 1, 1]


def test_encode_truncates_to_max_length(tokenizer, cls):
    [feature] = cls.encode([SentenceExample("word " * 50, label="x")], tokenizer, ["x"], 12)
    assert len(feature["input_ids"]) == 12 and feature["input_ids"][-1] == tokenizer.sep_token_id


def test_unknown_label_at_eval_names_file_and_line(tmp_path, tokenizer, cls):
    path = write(tmp_path, "dev.csv", "text,label\na,pos\nb,neutral\n")
    message, hint = error_text(lambda: cls.encode(cls.read(path), tokenizer, ["neg", "pos"], 16))
    assert message == (f"{path}:3: label 'neutral' was not in the training data; "
                       "known: neg, pos")
    assert hint == "remove or fix this label, or train on data that has it"


def test_without_targets_no_labels_needed(tokenizer, cls):
    [feature] = cls.encode([cls.parse_input("fine")], tokenizer, ["neg", "pos"], 16,
                           with_targets=False)
    assert "labels" not in feature


def test_collate_pads_to_the_longest(tokenizer, cls):
    examples = [SentenceExample("a", label="x"), SentenceExample("a b c d", label="y")]
    batch = cls.collate(cls.encode(examples, tokenizer, ["x", "y"], 16))
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels"}
    assert batch["input_ids"].shape == (2, 6)
    assert batch["input_ids"][0, 3:].tolist() == [tokenizer.pad_token_id] * 3
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0, 0], [1] * 6]
    assert batch["labels"].dtype == torch.int64 and batch["labels"].tolist() == [0, 1]


def test_classification_loss_is_cross_entropy(cls):
    logits = torch.tensor([[0.0, 0.0], [0.0, math.log(3)]])
    loss = cls.loss(logits, {"labels": torch.tensor([0, 1])})
    assert loss.item() == pytest.approx((math.log(2) - math.log(0.75)) / 2)


def test_regression_targets_loss_and_decode(tokenizer, reg):
    examples = [SentenceExample("a", label=1.0), SentenceExample("b", label=3.0)]
    features = reg.encode(examples, tokenizer, [], 16)
    batch = reg.collate(features)
    assert batch["labels"].dtype == torch.float32
    logits = torch.tensor([[2.0], [3.0]])
    assert reg.loss(logits, batch).item() == pytest.approx(0.5)
    predictions = reg.decode(list(logits), features, examples, [])
    assert predictions == [{"score": 2.0}, {"score": 3.0}]
    assert reg.describe(predictions[0]) == "2.0000"
    assert reg.metrics(predictions, examples, [])["pearson"] == pytest.approx(1.0)


# --- decoding, metrics, predict input --------------------------------------------------------

def test_classification_decode_gives_label_and_softmax_probability(tokenizer, cls):
    examples = [SentenceExample("a", label="pos"), SentenceExample("b", label="pos")]
    features = cls.encode(examples, tokenizer, ["neg", "pos"], 16)
    logits = [torch.tensor([0.0, math.log(3)], requires_grad=True), np.array([2.0, 0.0])]
    predictions = cls.decode(logits, features, examples, ["neg", "pos"])
    assert predictions[0] == {"label": "pos", "score": pytest.approx(0.75)}
    assert predictions[1]["label"] == "neg"
    assert cls.describe(predictions[0]) == "pos (0.750)"
    assert cls.metrics(predictions, examples, ["neg", "pos"]) == {
        "accuracy": 0.5, "macro_f1": pytest.approx((0 + 2 / 3) / 2)}


def test_parse_input_splits_the_pair_at_the_first_tab(cls):
    assert cls.parse_input("just text") == SentenceExample("just text")
    assert cls.parse_input("a\tb\tc") == SentenceExample("a", "b\tc")


def test_task_facts():
    facts = {name: (t.head_type, t.primary_metric, t.num_outputs(["a", "b", "c"]))
             for name, t in ((n, get_task(n)) for n in ("classification", "regression"))}
    assert facts == {"classification": ("sequence_classification", "accuracy", 3),
                     "regression": ("regression", "pearson", 1)}
    assert get_task("regression").label_names([SentenceExample("a", label=1.0)]) == []
