"""Very long texts cost what max_length needs: a bounded prefix is tokenised, with the same
features as the whole text, and a warning names the file and line. Files are streamed."""

from __future__ import annotations

import json

import pytest

from hubcli.errors import DataError
from hubcli.tasks import get_task
from hubcli.tasks.base import LONG_TEXT_CHARS, bounded_prefix, read_lines


@pytest.mark.parametrize("text", [
    "a gripping film, " * 20_000,
    "x" * 50 + " " * 5000 + "two words " * 30_000,       # a long run of whitespace first
    "東京タワーは美しい。" * 20_000,                      # no whitespace, one token per char
    "supercalifragilistic " * 20_000,
])
@pytest.mark.parametrize("max_length", [8, 64])
def test_bounded_prefix_truncates_like_the_whole_text(tokenizer, text, max_length):
    prefix = bounded_prefix(tokenizer, text, max_length)
    assert len(prefix) < len(text)
    whole = tokenizer(text, truncation=True, max_length=max_length)["input_ids"]
    assert tokenizer(prefix, truncation=True, max_length=max_length)["input_ids"] == whole


def test_long_line_in_a_jsonl_file_is_named_in_a_warning(tmp_path, tokenizer):
    path = tmp_path / "train.jsonl"
    long_text = "a gripping film " * (LONG_TEXT_CHARS // 10)
    rows = [{"text": "fine", "label": "pos"}, {"text": long_text, "label": "neg"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    task = get_task("classification")
    seen: list[str] = []
    task.notify = seen.append
    examples = task.read(path)
    features = task.encode(examples, tokenizer, ["neg", "pos"], 16)
    assert len(features[1]["input_ids"]) == 16
    assert features[1]["input_ids"] == tokenizer(long_text[:1000], truncation=True,
                                                 max_length=16)["input_ids"]
    assert seen == [f"warning: {path}:2: a text of {len(long_text):,} characters; only its "
                    "first 16 tokens are used (--max-length)"]


def test_read_lines_streams_and_names_a_bad_byte(tmp_path):
    path = tmp_path / "data.tsv"
    path.write_bytes(b"\xef\xbb\xbfsentence\tlabel\nok\t1\nbad \xff\t0\n")
    lines = read_lines(path)
    assert next(lines) == (1, "sentence\tlabel\n")  # the byte-order mark dropped
    assert next(lines) == (2, "ok\t1\n")
    with pytest.raises(DataError) as e:
        next(lines)
    assert str(e.value) == f"{path}:3: not UTF-8 text (byte 0xff)"
