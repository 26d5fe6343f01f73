"""Tagging: CoNLL reading (tags as given), first-sub-token alignment, windows, loss, decoding."""

import numpy as np
import pytest
import torch

from hubcli.errors import DataError, UsageError
from hubcli.tasks import get_task
from hubcli.tasks.base import IGNORE_INDEX, Columns
from hubcli.tasks.conll import TaggedSentence, to_iob2

LABELS = ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]


@pytest.fixture
def tag():
    return get_task("tagging")


def conll(tmp_path, text, name="d.conll"):
    path = tmp_path / name
    path.write_text(text)
    return path


def error_text(call) -> str:
    with pytest.raises(DataError) as info:
        call()
    return str(info.value)


def one_hot(labels_per_token: list[int], width: int = len(LABELS)) -> np.ndarray:
    logits = np.zeros((len(labels_per_token), width))
    for position, label in enumerate(labels_per_token):
        logits[position, max(label, 0)] = 5.0
    return logits


def test_to_iob2():
    assert to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-PER"]) == [
        "B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-PER"]
    iob2 = ["B-PER", "I-PER", "O", "B-LOC"]
    assert to_iob2(iob2) == iob2


def test_read_conll_keeps_iob1_and_reads_docstart_and_columns(tmp_path, tag):
    path = conll(tmp_path, "-DOCSTART- -X- -X- O\n\n"
                           "Anna NNP B-NP I-PER\nlives VBZ B-VP O\nin IN B-PP O\n"
                           "New NNP B-NP I-LOC\nYork NNP I-NP I-LOC\n\n\n"
                           "Bob NNP B-NP I-PER\n-DOCSTART- -X- -X- O\nOslo NNP B-NP I-LOC\n")
    sentences = tag.read(path)
    assert [(s.words, s.tags, s.line) for s in sentences] == [
        (("Anna", "lives", "in", "New", "York"), ("I-PER", "O", "O", "I-LOC", "I-LOC"), 3),
        (("Bob",), ("I-PER",), 10),
        (("Oslo",), ("I-LOC",), 12)]
    first = sentences[0]
    assert first.text == "Anna lives in New York" and first.spans[3] == (14, 17)
    assert tag.label_names(sentences) == LABELS


def test_label_names_include_both_prefixes_of_each_type(tag):
    sentence = TaggedSentence.from_words(["Oslo"], ["B-LOC"], "x", 1)
    assert tag.label_names([sentence]) == ["O", "B-LOC", "I-LOC"]


def test_line_without_a_tag(tmp_path, tag):
    path = conll(tmp_path, "Anna B-PER\nlives\n")
    assert error_text(lambda: tag.read(path)) == (
        f"{path}:2: expected a token and a tag separated by whitespace, found 'lives'")


def test_tag_that_is_not_iob(tmp_path, tag):
    path = conll(tmp_path, "Anna B-PER\n\nBob S-PER\n")
    assert error_text(lambda: tag.read(path)) == (
        f"{path}:3: tag 'S-PER' is not IOB (O, B-TYPE or I-TYPE)")


def test_only_docstart(tmp_path, tag):
    path = conll(tmp_path, "-DOCSTART- O\n\n")
    assert error_text(lambda: tag.read(path)) == f"{path}: no sentences, only -DOCSTART- lines"


def test_columns_do_not_apply(tmp_path, tag):
    with pytest.raises(UsageError, match="do not apply to task 'tagging'"):
        tag.read(conll(tmp_path, "a O\n"), columns=Columns(label="tag"))


def test_encode_labels_first_sub_token_only(tokenizer, tag):
    sentence = TaggedSentence.from_words(["Johanson", "visited", "Reykjavik"],
                                         ["B-PER", "O", "B-LOC"], "x", 1)
    [feature] = tag.encode([sentence], tokenizer, LABELS, 32)
    assert tokenizer.convert_ids_to_tokens(feature["input_ids"]) == [
        "[CLS]", "johan", "##son", "visited", "reykjavik", "[SEP]"]
    assert feature["word_ids"] == [None, 0, None, 1, 2, None]
    # Learnt in IOB1: entity-initial B-PER and B-LOC become I-PER (4) and I-LOC (3).
    assert feature["labels"] == [IGNORE_INDEX, 4, IGNORE_INDEX, 0, 3, IGNORE_INDEX]


def test_long_sentence_is_split_into_windows_labelling_each_word_once(tokenizer, tag):
    words = ["Johanson", "visited", "Reykjavik", "yesterday", "with", "Anna"]
    tags = ["B-PER", "O", "B-LOC", "O", "O", "B-PER"]
    sentence = TaggedSentence.from_words(words, tags, "x", 1)
    features = tag.encode([sentence], tokenizer, LABELS, 6)
    assert [f["word_ids"] for f in features] == [[None, 0, None, 1, 2, None],
                                                 [None, 3, 4, 5, None]]
    assert [f["labels"] for f in features] == [[-100, 4, -100, 0, 3, -100], [-100, 0, 0, 4, -100]]
    decoded = tag.decode([one_hot(f["labels"]) for f in features], features, [sentence], LABELS)
    assert decoded[0]["tags"] == tags


def test_word_cut_between_windows_is_labelled_in_the_first(tokenizer, tag):
    sentence = TaggedSentence.from_words(["visited", "Johanson"], ["O", "B-PER"], "x", 1)
    features = tag.encode([sentence], tokenizer, LABELS, 4)  # [CLS] visited johan [SEP]
    assert [f["word_ids"] for f in features] == [[None, 0, 1, None], [None, None, None]]
    assert features[1]["labels"] == [IGNORE_INDEX] * 3


def test_unknown_tag_names_the_line_of_the_word(tmp_path, tokenizer, tag):
    path = conll(tmp_path, "Anna B-PER\n\nBob B-PER\nin O\nOslo B-LOC\n", "dev.conll")
    message = error_text(lambda: tag.encode(tag.read(path), tokenizer, ["O", "B-PER", "I-PER"],
                                            16))
    assert message == (f"{path}:5: tag 'B-LOC' was not in the training data; "
                       "known: O, B-PER, I-PER")


def test_decode_character_offsets_of_raw_input(tokenizer, tag):
    example = tag.parse_input("  Anna  lives in New   York.")
    assert example.words == ("Anna", "lives", "in", "New", "York.")
    [feature] = tag.encode([example], tokenizer, LABELS, 32, with_targets=False)
    assert "labels" not in feature
    # tokens: [CLS] anna lives in new york . [SEP]; IOB1, as the model learns: I-PER O O I-LOC I-LOC
    per_token = [0, 4, 0, 0, 3, 3, 3, 0]
    [prediction] = tag.decode([torch.tensor(one_hot(per_token))], [feature], [example], LABELS)
    assert prediction["tags"] == ["B-PER", "O", "O", "B-LOC", "I-LOC"]
    entities = [(e["text"], e["type"], e["start"], e["end"]) for e in prediction["entities"]]
    assert entities == [("Anna", "PER", 2, 6), ("New   York.", "LOC", 17, 28)]
    assert prediction["entities"][0]["score"] == pytest.approx(
        np.exp(5) / (np.exp(5) + len(LABELS) - 1))
    assert tag.describe(prediction) == "Anna (PER, 2-6); New   York. (LOC, 17-28)"


def test_a_word_without_tokens_leaves_a_label_set_without_o_a_path(tokenizer):
    """A word with no token of its own is "O"; where the labels have no "O" it must be left
    unconstrained, not impossible: one impossible word would leave its sentence no path."""
    tag = get_task("tagging", {"label_scheme": "IOB1"})
    labels = ["B-LOC", "B-PER", "I-LOC", "I-PER"]
    example = tag.parse_input("Anna \u200b lives")  # a zero-width space: no token
    [feature] = tag.encode([example], tokenizer, labels, 32, with_targets=False)
    # tokens: [CLS] anna lives [SEP]; IOB1: I-PER, then I-LOC
    logits = torch.tensor(one_hot([0, 3, 2, 0], width=len(labels)))
    [prediction] = tag.decode([logits], [feature], [example], labels)
    assert len(prediction["tags"]) == 3
    assert (prediction["tags"][0], prediction["tags"][2]) == ("B-PER", "B-LOC")


def test_decode_empty_input(tokenizer, tag):
    example = tag.parse_input("   ")
    features = tag.encode([example], tokenizer, LABELS, 16, with_targets=False)
    [prediction] = tag.decode([one_hot([0, 0])], features, [example], LABELS)
    assert prediction == {"entities": [], "tags": []}
    assert tag.describe(prediction) == "no entities"


def test_collate_and_loss(tokenizer, tag):
    sentences = [TaggedSentence.from_words(["Oslo"], ["B-LOC"], "x", 1),
                 TaggedSentence.from_words(["Anna", "lives"], ["B-PER", "O"], "x", 3)]
    batch = tag.collate(tag.encode(sentences, tokenizer, LABELS, 16))
    assert batch["labels"].tolist() == [[-100, 3, -100, -100], [-100, 4, 0, -100]]  # IOB1 ids
    perfect = torch.tensor(np.stack([one_hot(row) for row in batch["labels"].tolist()])) * 10
    assert tag.loss(perfect, batch).item() == pytest.approx(0.0, abs=1e-6)
    nothing = {"labels": torch.full((1, 3), IGNORE_INDEX)}
    logits = torch.zeros(1, 3, len(LABELS), requires_grad=True)
    loss = tag.loss(logits, nothing)
    loss.backward()
    assert loss.item() == 0.0 and logits.grad.abs().sum() == 0


def test_metrics_are_entity_level(tag):
    gold = [TaggedSentence.from_words(["Anna", "in", "Oslo"], ["B-PER", "O", "B-LOC"], "x", 1)]
    predictions = [{"entities": [], "tags": ["B-PER", "O", "O"]}]
    assert tag.metrics(predictions, gold, LABELS) == {"precision": 1.0, "recall": 0.5,
                                                      "f1": pytest.approx(2 / 3)}


def test_iob1_model_output_comes_out_as_iob2_with_the_same_entities(tokenizer, tag):
    # An IOB1-trained model predicts I- at entity starts and B- only between same-type entities.
    example = tag.parse_input("Anna Bob visited New York")
    [feature] = tag.encode([example], tokenizer, LABELS, 32, with_targets=False)
    # tokens: [CLS] anna bob visited new york [SEP]; IOB1: I-PER B-PER O I-LOC I-LOC
    [prediction] = tag.decode([one_hot([0, 4, 2, 0, 3, 3, 0])], [feature], [example], LABELS)
    assert prediction["tags"] == ["B-PER", "B-PER", "O", "B-LOC", "I-LOC"]
    assert [(e["text"], e["type"]) for e in prediction["entities"]] == [
        ("Anna", "PER"), ("Bob", "PER"), ("New York", "LOC")]


def test_loss_sums_tokens_over_a_fixed_normaliser(tokenizer, tag):
    short = TaggedSentence.from_words(["Oslo"], ["B-LOC"], "x", 1)
    long = TaggedSentence.from_words(["Anna", "lives", "in", "Oslo", "now"],
                                     ["B-PER", "O", "O", "B-LOC", "O"], "x", 3)
    features = tag.encode([short, short, long, long], tokenizer, LABELS, 16)
    tag.fit_loss(features, batch_size=2)
    assert tag.tokens_per_batch == 2 * (1 + 1 + 5 + 5) / 4  # labelled tokens of a mean batch
    shorts, longs = tag.collate(features[:2]), tag.collate(features[2:])
    # Uniform logits: every labelled token costs log(5), whatever batch it is in.
    per_token = np.log(len(LABELS))
    for batch, tokens in ((shorts, 2), (longs, 10)):
        logits = torch.zeros(*batch["labels"].shape, len(LABELS))
        assert tag.loss(logits, batch).item() == pytest.approx(tokens * per_token / 6)


def test_iob2_and_iob1_files_are_learnt_alike(tokenizer, tag):
    words = ["Anna", "Berg", "Carl", "met", "Oslo"]
    iob2 = TaggedSentence.from_words(words, ["B-PER", "I-PER", "B-PER", "O", "B-LOC"], "x", 1)
    iob1 = TaggedSentence.from_words(words, ["I-PER", "I-PER", "B-PER", "O", "I-LOC"], "x", 1)
    [a], [b] = (tag.encode([s], tokenizer, LABELS, 32) for s in (iob2, iob1))
    assert a["labels"] == b["labels"]
    # B- survives only where an entity directly follows one of its type (Carl after Anna Berg).
    assert [LABELS[i] for i in a["labels"] if i != IGNORE_INDEX] == [
        "I-PER", "I-PER", "B-PER", "O", "I-LOC"]


def test_decode_keeps_to_the_iob1_lattice_and_greedy_without_a_recorded_scheme(tokenizer, tag):
    example = tag.parse_input("Anna visited Oslo")
    [feature] = tag.encode([example], tokenizer, LABELS, 32, with_targets=False)
    # tokens: [CLS] anna visited oslo [SEP]; "visited" is most likely B-PER, which IOB1 does
    # not allow after O, and hardly I-PER; "oslo" I-LOC
    logits = np.log(np.array([[0.2] * 5,
                              [0.70, 0.05, 0.05, 0.05, 0.15],
                              [0.35, 0.05, 0.40, 0.15, 0.05],
                              [0.05, 0.05, 0.05, 0.80, 0.05],
                              [0.2] * 5]))
    # best valid: O O I-LOC (0.7 * 0.35 * 0.8) over O I-LOC I-LOC (0.7 * 0.15 * 0.8)
    [prediction] = tag.decode([logits], [feature], [example], LABELS)
    assert tag.label_scheme == "IOB1"
    assert prediction["tags"] == ["O", "O", "B-LOC"]
    assert [(e["text"], e["score"]) for e in prediction["entities"]] == [
        ("Oslo", pytest.approx(0.8))]
    greedy = get_task("tagging", {"type": "token_classification", "labels": LABELS})
    assert greedy.label_scheme is None  # an imported or older head: no scheme recorded
    [prediction] = greedy.decode([logits], [feature], [example], LABELS)
    assert prediction["tags"] == ["O", "B-PER", "B-LOC"]
    assert [(e["text"], e["score"]) for e in prediction["entities"]] == [
        ("visited", pytest.approx(0.4)), ("Oslo", pytest.approx(0.8))]


def test_head_records_the_scheme_it_learnt_in():
    from hubcli.core.heads import HeadConfig

    head = HeadConfig("token_classification", 5, tuple(LABELS), label_scheme="IOB1")
    assert head.to_manifest()["label_scheme"] == "IOB1"
    assert HeadConfig.from_manifest(head.to_manifest()) == head
    assert get_task("tagging", head.to_manifest()).label_scheme == "IOB1"
    assert "label_scheme" not in HeadConfig("sequence_classification", 2).to_manifest()
