"""What every task provides to the trainer and to `hub predict`, plus helpers they share.

A task turns a data file into examples, examples into model features (python lists, one or more
features per example), features into padded tensor batches, logits into a loss, and logits back
into one JSON-able prediction per example, which it then scores. Examples remember the file and
line they came from so that errors found late (an unknown label in the dev set) can point there.
"""

from __future__ import annotations

import codecs
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hubcli.errors import DataError, UsageError

if TYPE_CHECKING:
    import torch

IGNORE_INDEX = -100  # targets the loss skips (torch's cross_entropy default ignore_index)
SEQUENCE_KEYS = ("input_ids", "attention_mask", "token_type_ids")
# Extensions that say a file's format; other names (eng.train, dev.txt) leave it to --format
# or to a task that reads one format only.
BY_SUFFIX = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
             ".conll": "conll"}
FORMAT_NAMES = {"csv": "CSV", "tsv": "TSV", "jsonl": "JSONL", "conll": "CoNLL",
                "squad": "SQuAD JSON"}
# A text longer than this is tokenised only as far as max_length needs, with a warning naming
# its line (tokenising a 50 MB line whole took gigabytes: the tokenizer keeps every window).
LONG_TEXT_CHARS = 100_000
CHARS_PER_TOKEN = 16  # first guess of the prefix holding enough tokens; grown x4 until it does
_WHITESPACE = re.compile(r"\s")


@dataclass(frozen=True)
class Columns:
    """Column names chosen with --text-column, --text-pair-column and --label-column."""

    text: str | None = None
    pair: str | None = None
    label: str | None = None


class Task(ABC):
    """One kind of problem: its data format, head, loss, decoding and metrics."""

    name: str
    head_type: str
    primary_metric: str
    formats: tuple[str, ...]
    target_keys: tuple[str, ...] = ("labels",)  # feature keys collate() turns into targets
    # Training batches of similar lengths pad less; a task whose examples differ in kind by
    # length (tagging: headlines against sentences) learns worse from such batches.
    bucket_by_length: bool = True
    # loss() sums over a batch's rows over a normaliser fixed for a whole batch (fit_loss), so
    # a part of a batch scores its own share as it is; else it is a mean over the rows given
    loss_sums: bool = False
    # What `hub predict` calls the second text of an input (--pair, --context), if it takes one
    second_input: str | None = None
    # The scheme the head's labels are in (tagging: IOB1), recorded in the manifest's head and
    # read back by get_task(); decoding keeps to it. None: no scheme, or none recorded.
    label_scheme: str | None = None
    # Std of a fresh Houlsby adapter's weights (`hub train --init-scale` overrides): near zero,
    # so training starts from the frozen base's own outputs.
    adapter_init_scale: float = 1e-3
    # What a Houlsby adapter's bottleneck reads (`hub train --reads` overrides): the sublayer's
    # output, as in the paper, unless a task learns better from another form.
    adapter_reads: str = "output"

    def __init__(self) -> None:
        # Set by encode() from the tokenizer, so collate() can pad without being handed it.
        self.pad_id = 0
        # Where warnings about the data go (train and predict set it; silent by default).
        self.notify: Callable[[str], None] = lambda _message: None
        # The caller's number of each input given, where they are some of the caller's (the
        # texts one adapter takes of a routed list); None: 1, 2, ... (`input_number`).
        self.numbers: list[int] | None = None

    def input_number(self, index: int) -> int:
        """What warnings and errors call input `index` (from 0) of those given: the caller's
        number for it."""
        return index + 1 if self.numbers is None else self.numbers[index]

    @abstractmethod
    def read(self, path: Path, *, fmt: str | None = None, columns: Columns = Columns()) -> list:
        """Examples of a data file; `fmt` None infers the format from the file name.

        Raises:
            DataError: the file is missing, empty or malformed (names the file and line).
            UsageError: `fmt` is not one of `formats`, or columns were given where none apply.
        """

    @abstractmethod
    def label_names(self, examples: list) -> list[str]:
        """The label set a head is built for; [] where outputs are not labels."""

    def check_training_labels(self, labels: list[str], path: Path) -> None:
        """Refuse a training set whose labels nothing can be learnt from; most tasks accept any.

        Raises:
            DataError: see the subclass.
        """

    @abstractmethod
    def num_outputs(self, labels: list[str]) -> int:
        """Size of the head's last dimension."""

    @abstractmethod
    def encode(self, examples: list, tokenizer: Any, labels: list[str], max_length: int, *,
               with_targets: bool = True) -> list[dict]:
        """Model features; each names its `example_index` and, with targets, what to learn.

        Raises:
            DataError: an example's label is not in `labels` (names its file and line).
        """

    @abstractmethod
    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Loss of a batch made by collate(), scaled like a mean over its examples."""

    def fit_loss(self, features: list[dict], batch_size: int) -> None:
        """Fix what loss() needs from the whole training set before training; most need nothing."""

    @abstractmethod
    def decode(self, logits_per_feature: list, features: list[dict], examples: list,
               labels: list[str]) -> list[dict]:
        """One JSON-able prediction per example, in example order."""

    @abstractmethod
    def metrics(self, predictions: list[dict], examples: list, labels: list[str]
                ) -> dict[str, float]:
        """Scores of decode()'s predictions against the examples' gold labels."""

    @abstractmethod
    def parse_input(self, line: str, second: str | None = None) -> Any:
        """An unlabelled example from one line given to `hub predict`; `second` is the second
        text given apart (`--pair`, `--context`), else the line holds it after a TAB.

        Raises:
            UsageError: the line lacks a part the task needs.
        """

    def check_inputs(self, examples: list, text_pairs: bool | None, name: str) -> None:
        """Raises UsageError: an input adapter `name` was not trained to take (its manifest's
        `training.text_pairs`). Only sentence tasks say anything (a pair, or a single
        text)."""

    @abstractmethod
    def describe(self, pred: dict) -> str:
        """One line of human-readable text for a prediction."""

    def collate(self, features: list[dict]) -> dict[str, torch.Tensor]:
        """Tensors for the model and the loss, padded to the batch's longest feature.

        Targets go in as they are: a list is padded with IGNORE_INDEX, ints become int64 and
        floats float32. Keys the model does not take (offsets, word ids) are left out.
        """
        import torch

        width = max(len(f["input_ids"]) for f in features)
        batch = {k: torch.tensor(rows) for k, rows in self.padded_inputs(features).items()}
        for key in self.target_keys:
            if key in features[0]:
                values = [f[key] for f in features]
                if isinstance(values[0], list):
                    batch[key] = torch.tensor([_pad(v, width, IGNORE_INDEX) for v in values])
                else:
                    dtype = torch.float32 if isinstance(values[0], float) else torch.int64
                    batch[key] = torch.tensor(values, dtype=dtype)
        return batch

    def padded_inputs(self, features: list[dict]) -> dict[str, list[list[int]]]:
        """The model's inputs (SEQUENCE_KEYS present in the features) as lists padded to the
        batch's longest feature: what `collate` makes tensors of, and what a runtime without
        torch (ONNX) makes arrays of."""
        width = max(len(f["input_ids"]) for f in features)
        return {key: [_pad(f[key], width, self.pad_id if key == "input_ids" else 0)
                      for f in features]
                for key in SEQUENCE_KEYS if key in features[0]}

    def _bounded(self, tokenizer: Any, text: str, tokens: int, path: str | None,
                 line: int | None, index: int) -> str:
        """`text`, or for a very long one the prefix that truncates to the same first `tokens`
        tokens (bounded_prefix), with a warning naming its file and line."""
        if len(text) <= LONG_TEXT_CHARS:
            return text
        where = (f"{path}:{line}" if path and line else
                 f"{path} {index + 1}" if path else f"input {self.input_number(index)}")
        self.notify(f"warning: {where}: a text of {len(text):,} characters; only its first "
                    f"{tokens} tokens are used (--max-length)")
        return bounded_prefix(tokenizer, text, tokens)

    def data_format(self, path: Path, fmt: str | None = None, *, reader: str | None = None
                    ) -> str:
        """The format to read `path` in: `fmt` if given, else from the file's extension, else
        the task's only format. `reader` names who refuses a file of another format (default:
        "task 'NAME'"; `hub eval` names the adapter).

        Raises:
            UsageError: `fmt` is not one of `formats`, or the extension names a format the task
                does not read (a TSV file for tagging).
            DataError: `fmt` is None and neither the extension nor the task tells the format.
        """
        if fmt is not None:
            if fmt not in self.formats:
                raise UsageError(f"format {fmt!r} does not apply to task {self.name!r}",
                                 hint=f"use --format {' or '.join(self.formats)}")
            return fmt
        found = BY_SUFFIX.get(path.suffix.lower())
        if found is None and len(self.formats) == 1:
            return self.formats[0]  # CoNLL files are often named eng.train, eng.testa
        if found is None:
            raise DataError(f"cannot tell the format from the extension {path.suffix!r}",
                            path=str(path), hint=f"pass --format {'|'.join(self.formats)}")
        if found not in self.formats:
            wanted = " or ".join(FORMAT_NAMES[f] for f in self.formats)
            raise UsageError(f"{path} is a {FORMAT_NAMES[found]} file (by its extension), but "
                             f"{reader or f'task {self.name!r}'} reads {wanted}",
                             hint=f"give it {wanted} data, or pass --format {self.formats[0]} "
                                  f"if the file is {FORMAT_NAMES[self.formats[0]]} whatever its name")
        return found

    def _no_columns(self, columns: Columns) -> None:
        """Column flags mean nothing for formats with a fixed layout; say so instead of ignoring.

        Raises:
            UsageError: a column was given.
        """
        if columns != Columns():
            raise UsageError(f"--text-column, --text-pair-column and --label-column do not "
                             f"apply to task {self.name!r}",
                             hint=f"the {self.formats[0]} format fixes where text and labels are")


def bounded_prefix(tokenizer: Any, text: str, tokens: int) -> str:
    """A prefix of `text`, cut at whitespace, that holds more than `tokens` tokens (the whole
    text when it has fewer): truncating it to `tokens` tokens gives what truncating the whole
    text gives, at a cost bounded by the prefix instead of the text. (A text without whitespace
    for CHARS_PER_TOKEN * tokens characters is cut there, inside that run.)"""
    size = tokens * CHARS_PER_TOKEN
    while size < len(text):
        space = _WHITESPACE.search(text, size, 2 * size)
        prefix = text[:space.start() if space else size]
        if len(tokenizer(prefix, add_special_tokens=False)["input_ids"]) > tokens:
            return prefix
        size *= 4
    return text


@contextmanager
def readable(path: Path) -> Iterator[None]:
    """Inside, an OSError reading `path` becomes a one-line DataError naming it.

    Raises:
        DataError: the file is missing, or cannot be read (a folder, no permission).
    """
    try:
        yield
    except FileNotFoundError:
        raise DataError("file not found", path=str(path)) from None
    except OSError as e:
        raise DataError(f"cannot read the file: {e.strerror}", path=str(path)) from None


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based number, line with its ending) of each line of a UTF-8 file, an optional
    byte-order mark dropped, read one line at a time: memory is bounded by the longest line.
    Only a line feed ends a line (JSON strings may hold U+2028).

    Raises:
        DataError: the file is missing, unreadable, not UTF-8 (names the line), or empty; the
            last only once every line was given.
    """
    with readable(path):
        f = open(path, "rb")
    blank = True
    with f:
        for number, raw in enumerate(f, 1):
            if number == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"not UTF-8 text (byte 0x{raw[e.start]:02x})", path=str(path),
                                line=number, hint="save the file as UTF-8") from None
            blank = blank and not line.strip()
            yield number, line
    if blank:
        raise DataError("file is empty", path=str(path))


def read_text(path: Path) -> str:
    """The whole file as text (UTF-8, an optional byte-order mark dropped).

    Raises:
        DataError: the file is missing, unreadable, not UTF-8, or empty.
    """
    with readable(path):
        raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise DataError(f"not UTF-8 text (byte 0x{raw[e.start]:02x})", path=str(path),
                        line=line, hint="save the file as UTF-8") from None
    if not text.strip():
        raise DataError("file is empty", path=str(path))
    return text


def as_array(values: Any) -> np.ndarray:
    """A float64 numpy copy of a tensor (any device or dtype, with or without grad) or array."""
    if hasattr(values, "detach"):
        values = values.detach().float().cpu().numpy()
    return np.asarray(values, dtype=np.float64)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, shifted by the maximum so large logits do not overflow."""
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-softmax over the last axis, shifted by the maximum so large logits do not overflow."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def unknown_label(label: str, labels: list[str], *, what: str, path: str | None,
                  line: int | None) -> DataError:
    """The error for an evaluation label the model has no output for."""
    return DataError(f"{what} {label!r} was not in the training data; known: {', '.join(labels)}",
                     path=path, line=line,
                     hint=f"remove or fix this {what}, or train on data that has it")


def _pad(values: list, width: int, pad: Any) -> list:
    return values + [pad] * (width - len(values))
