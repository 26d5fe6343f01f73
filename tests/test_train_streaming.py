"""`hub train --streaming`: the training file read as a stream, batch by batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hubcli.cli.main import cli
from hubcli.format import manifest as manifest_io
from hubcli.local import streaming
from hubcli.local.distributed import Group
from hubcli.tasks import get_task

WORDS = ["good", "bad", "film", "plot", "great", "dull", "acting", "fine"]


def write_jsonl(path: Path, n: int) -> Path:
    with open(path, "w") as f:
        for i in range(n):
            words = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(3 + i % 5))
            f.write(json.dumps({"text": f"{i} {words}", "label": ["neg", "pos"][i % 2]}) + "\n")
    return path


def test_each_epoch_covers_every_example_once_in_a_fixed_order(tmp_path, tokenizer,
                                                               monkeypatch):
    monkeypatch.setattr(streaming, "BUFFER_BATCHES", 2)  # several windows in 100 examples
    task = get_task("classification")
    stream = streaming.TrainStream(task, write_jsonl(tmp_path / "d.jsonl", 100), None,
                                   streaming.Columns())
    assert (stream.examples, stream.labels) == (100, ["neg", "pos"])
    source = streaming.StreamBatches(stream, tokenizer, stream.labels, 16, 16, 0, Group())
    assert source.batches_per_epoch() == 7

    def order(epoch: int) -> list[list[int]]:
        # the number each text starts with, batch by batch
        return [[int(tokenizer.decode(f["input_ids"][1:2])) for f in b]
                for b in source.epoch(epoch)]

    first = order(1)
    assert [len(b) for b in first] == [16] * 6 + [4]
    assert sorted(i for b in first for i in b) == list(range(100))
    assert first == order(1) and first != order(2)  # replayable, reshuffled every epoch
    # a window shuffle: the first window's examples (0-31) fill the first two batches
    assert sorted(first[0] + first[1]) == list(range(32))
    # rank 1 of 2 tokenises only its positions of each batch
    ranked = streaming.StreamBatches(stream, tokenizer, stream.labels, 16, 16, 0, Group(1, 2))
    batch = next(iter(ranked.epoch(1)))
    assert batch[0::2] == [None] * 8
    assert [int(tokenizer.decode(f["input_ids"][1:2])) for f in batch[1::2]] == first[0][1::2]


def test_train_streaming_writes_an_adapter(tiny_base_dir, tmp_path):
    data = write_jsonl(tmp_path / "train.jsonl", 120)
    out = tmp_path / "a"
    result = CliRunner().invoke(cli, ["train", "--base", str(tiny_base_dir), "--train", str(data),
                                      "--out", str(out), "--streaming", "--max-steps", "5",
                                      "--batch-size", "16", "--max-length", "16",
                                      "--bottleneck", "4", "--quiet"])
    assert result.exit_code == 0, result.output
    t = manifest_io.read(out)["training"]
    assert t["train_data"]["examples"] == 120 and t["steps"] == 5
    assert manifest_io.read(out)["head"]["labels"] == ["neg", "pos"]


def test_streaming_is_refused_for_tasks_with_other_formats(tiny_base_dir, tmp_path):
    from hubcli.data import ner_sample

    train, _ = ner_sample()
    result = CliRunner().invoke(cli, ["train", "--task", "tagging", "--base", str(tiny_base_dir),
                                      "--train", str(train), "--out", str(tmp_path / "a"),
                                      "--streaming"])
    assert result.exit_code == 1
    assert "--streaming reads CSV, TSV or JSONL training data; task 'tagging' reads conll" \
        in result.stderr
