"""`hub train --streaming`: a CSV, TSV or JSONL training file read as a stream, so memory stays
flat however large the file.

One pass first counts the examples and gathers the label set (what the head and the schedule
need); every epoch then reads the file again, shuffling within a buffer of BUFFER_BATCHES
batches at a time (a window shuffle: examples far apart in the file never meet in a batch) and
tokenising batch by batch. Batches are not grouped by length: that needs every length first. In
a distributed run every rank reads the file but tokenises only its own shard of each batch
(the other positions stay None; `Group.shard` never hands them out). The validation file is
read whole, as without --streaming.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from hubcli.errors import UsageError
from hubcli.tasks.base import Columns

BUFFER_BATCHES = 100
STREAMED_FORMATS = ("csv", "tsv", "jsonl")


class TrainStream:
    """A training file to stream: its examples counted and labels gathered in one pass."""

    def __init__(self, task, path: Path, fmt: str | None, columns: Columns):
        """Raises:
            UsageError: the task does not read CSV, TSV or JSONL (tagging, QA).
            DataError: see the task's `iter_examples` (file and line named).
        """
        if not hasattr(task, "iter_examples"):
            raise UsageError(f"--streaming reads CSV, TSV or JSONL training data; task "
                             f"{task.name!r} reads {', '.join(task.formats)}",
                             hint="drop --streaming (the file is then read into memory)")
        self.task, self.path, self.columns = task, Path(path), columns
        self.fmt = task.data_format(self.path, fmt)
        self.examples = 0
        counted = self._counting()
        self.labels: list[str] = task.label_names(counted)
        for _ in counted:  # tasks whose labels are not a set (regression) read nothing
            pass

    def _counting(self) -> Iterator[Any]:
        for example in self.read():
            self.examples += 1
            yield example

    def read(self) -> Iterator[Any]:
        return self.task.iter_examples(self.path, fmt=self.fmt, columns=self.columns)


class StreamBatches:
    """Each epoch's training batches from a TrainStream: the same for the same seed and epoch
    (a resumed run skips what it had trained), encoded only at this rank's positions."""

    def __init__(self, stream: TrainStream, tokenizer, labels: list[str], max_length: int,
                 batch_size: int, seed: int, group) -> None:
        self.stream, self.tokenizer, self.labels = stream, tokenizer, labels
        self.max_length, self.batch_size, self.seed, self.group = (max_length, batch_size,
                                                                   seed, group)
        self.examples = stream.examples

    def batches_per_epoch(self) -> int:
        return -(-self.examples // self.batch_size)

    def epoch(self, number: int) -> Iterator[list[dict | None]]:
        rng = random.Random(f"{self.seed}:{number}")
        rows = self.stream.read()
        pending: list = []
        while chunk := list(islice(rows, self.batch_size * BUFFER_BATCHES)):
            rng.shuffle(chunk)
            pending += chunk
            while len(pending) >= self.batch_size:
                yield self._encode(pending[:self.batch_size])
                pending = pending[self.batch_size:]
        if pending:
            yield self._encode(pending)

    def _encode(self, examples: list) -> list[dict | None]:
        batch: list[dict | None] = [None] * len(examples)
        mine = range(self.group.rank, len(examples), self.group.world)
        features = self.stream.task.encode([examples[i] for i in mine], self.tokenizer,
                                           self.labels, self.max_length)
        for i, feature in zip(mine, features):
            batch[i] = feature
        return batch
