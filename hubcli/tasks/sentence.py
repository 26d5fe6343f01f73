"""What classification and regression share: sentence(-pair) examples from CSV, TSV or JSONL,
one feature per example, and `text<TAB>pair` input lines for `hub predict`."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hubcli.errors import DataError, UsageError
from hubcli.tasks.base import SEQUENCE_KEYS, Columns, Task
from hubcli.tasks.tabular import FORMATS, read_rows


@dataclass(frozen=True)
class SentenceExample:
    """A text, an optional second text, and a label (None when unlabelled, as in predict)."""

    text: str
    pair: str | None = None
    label: str | float | None = None
    path: str | None = None
    line: int | None = None


class SentenceTask(Task):
    """A task with one output per sentence or sentence pair; subclasses say what a label is."""

    formats = FORMATS
    second_input = "pair"

    def read(self, path: Path, *, fmt: str | None = None,
             columns: Columns = Columns()) -> list[SentenceExample]:
        """Examples of a CSV, TSV or JSONL file (format from the extension unless `fmt`).

        Raises:
            DataError: see tabular.read_rows(), and labels the task cannot use.
            UsageError: `fmt` is not csv, tsv or jsonl, or the extension is .conll.
        """
        return list(self.iter_examples(path, fmt=fmt, columns=columns))

    def iter_examples(self, path: Path, *, fmt: str | None = None,
                      columns: Columns = Columns()) -> Iterator[SentenceExample]:
        """The examples of `read`, one at a time as the file is read (`hub train --streaming`:
        memory bounded by what the caller keeps).

        Raises:
            DataError, UsageError: see `read`.
        """
        fmt = self.data_format(path, fmt)
        where = str(path)
        for row in read_rows(path, fmt, columns):
            yield SentenceExample(row.text, row.pair, self._parse_label(row.label, path, row.line),
                                  where, row.line)

    def encode(self, examples: list[SentenceExample], tokenizer: Any, labels: list[str],
               max_length: int, *, with_targets: bool = True) -> list[dict]:
        """One feature per example, truncated to `max_length` tokens (the longer text first).

        Raises:
            DataError: a classification label is not in `labels`.
        """
        self.pad_id = tokenizer.pad_token_id or 0
        features = []
        for index, example in enumerate(examples):
            text, pair = (self._bounded(tokenizer, part, max_length, example.path, example.line,
                                        index) if part else part
                          for part in (example.text, example.pair))
            encoding = tokenizer(text, pair, truncation=True, max_length=max_length)
            feature: dict = {key: encoding[key] for key in SEQUENCE_KEYS if key in encoding}
            feature["example_index"] = index
            if with_targets:
                feature["labels"] = self._target(example, labels)
            features.append(feature)
        return features

    def parse_input(self, line: str, second: str | None = None) -> SentenceExample:
        """`text`, or `text<TAB>pair` for a model trained on sentence pairs (or `second`)."""
        if second is not None:
            return SentenceExample(line, second)
        text, tab, pair = line.partition("\t")
        return SentenceExample(text, pair if tab else None)

    def check_inputs(self, examples: list[SentenceExample], text_pairs: bool | None,
                     name: str) -> None:
        """A single text where adapter `name` was trained on sentence pairs, or a pair where
        it was trained on single texts (`text_pairs`, its manifest's `training.text_pairs`;
        nothing is checked where it is not recorded, None).

        Raises:
            DataError: such an example of a data file (`hub eval`), naming its line.
            UsageError: such an input (`hub predict`, the API, `hub serve`).
        """
        if text_pairs is None:
            return
        for index, example in enumerate(examples):
            if (example.pair is not None) == text_pairs:
                continue
            if example.path is not None:  # a data file's row
                problem, hint = ((f"one text, and {name} was trained on sentence pairs",
                                  "give data with the second texts (--text-pair-column)")
                                 if text_pairs else
                                 (f"a second text, and {name} was trained on single texts",
                                  "give data without a second-text column"))
                raise DataError(problem, path=example.path, line=example.line, hint=hint)
            number = self.input_number(index)
            if text_pairs:
                raise UsageError(f"input {number} is one text, and {name} was trained on "
                                 "sentence pairs", hint="give each input as TEXT<TAB>PAIR "
                                 "(hub predict with one adapter: or --pair PAIR)")
            raise UsageError(f"input {number} has a second text (--pair, or a TAB in the "
                             f"line), and {name} was trained on single texts",
                             hint="leave out --pair, and any TAB in the input")

    @abstractmethod
    def _parse_label(self, raw: Any, path: Path, line: int) -> str | float:
        """The label of a cell as read from the file.

        Raises:
            DataError: the task cannot use it.
        """

    @abstractmethod
    def _target(self, example: SentenceExample, labels: list[str]) -> int | float:
        """What the loss compares the output with.

        Raises:
            DataError: the example's label has no output.
        """
