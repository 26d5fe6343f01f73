"""CoNLL reader for tagging: one token per line, its tag in the last column.

Blank lines end a sentence; `-DOCSTART-` lines are document breaks and end one too. Tags are
IOB1 or IOB2 (`O`, `B-TYPE`, `I-TYPE`) and are kept as given; tagging learns them in IOB1
(`to_iob1`, see tasks/tagging.py), decodes in IOB1's lattice (tasks/lattice.py) and puts
predictions out as IOB2 (`to_iob2`); entity_spans() reads both alike.
"""

from __future__ import annotations

import re
from itertools import chain
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hubcli.errors import DataError
from hubcli.tasks.base import read_lines

_TAG = re.compile(r"O|[BI]-\S+")


@dataclass(frozen=True)
class TaggedSentence:
    """Words with their character spans in `text`, and IOB1 or IOB2 tags (None when unlabelled).

    `line` is the file line of the first word; word i is on line `line + i`.
    """

    text: str
    words: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]
    tags: tuple[str, ...] | None = None
    path: str | None = None
    line: int | None = None

    @classmethod
    def from_text(cls, text: str) -> TaggedSentence:
        """Words split at whitespace, keeping where each one is in `text`."""
        found = list(re.finditer(r"\S+", text))
        return cls(text, tuple(m.group() for m in found), tuple(m.span() for m in found))

    @classmethod
    def from_words(cls, words: Sequence[str], tags: Sequence[str], path: str,
                   line: int) -> TaggedSentence:
        """A sentence whose text is the words joined by single spaces."""
        spans, start = [], 0
        for word in words:
            spans.append((start, start + len(word)))
            start += len(word) + 1
        return cls(" ".join(words), tuple(words), tuple(spans), tuple(tags), path, line)


def read_conll(path: Path) -> list[TaggedSentence]:
    """The sentences of a CoNLL file, tags as given (IOB1 or IOB2).

    Raises:
        DataError: the file is missing or empty, a line has fewer than two columns, a tag is not
            IOB, or there is no sentence at all (names the file and line).
    """
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[str] = []
    first = 0
    for number, raw in chain(read_lines(path), [(0, "")]):  # a last blank line ends a sentence
        raw = raw.removesuffix("\n")
        parts = raw.split()
        if not parts or parts[0] == "-DOCSTART-":
            if words:
                sentences.append(TaggedSentence.from_words(words, tags, str(path), first))
                words, tags = [], []
            continue
        if len(parts) < 2:
            raise DataError(f"expected a token and a tag separated by whitespace, found {raw!r}",
                            path=str(path), line=number,
                            hint="one token per line with its tag in the last column; "
                                 "a blank line between sentences")
        if not _TAG.fullmatch(parts[-1]):
            raise DataError(f"tag {parts[-1]!r} is not IOB (O, B-TYPE or I-TYPE)",
                            path=str(path), line=number, hint="use IOB1 or IOB2 tags")
        if not words:
            first = number
        words.append(parts[0])
        tags.append(parts[-1])
    if not sentences:
        raise DataError("no sentences, only -DOCSTART- lines", path=str(path))
    return sentences


def to_iob1(tags: Sequence[str]) -> list[str]:
    """IOB1 tags from IOB2 or IOB1 ones: a `B-X` that does not directly follow an X entity
    becomes `I-X`; IOB1 tags pass unchanged."""
    return _retag_entity_starts(tags, "B", "I")


def to_iob2(tags: Sequence[str]) -> list[str]:
    """IOB2 tags from IOB1 or IOB2 ones: an `I-X` that starts an entity becomes `B-X`.

    In IOB1 an entity starts with I-X unless it directly follows another X entity (then B-X);
    IOB2 tags pass unchanged.
    """
    return _retag_entity_starts(tags, "I", "B")


def _retag_entity_starts(tags: Sequence[str], old: str, new: str) -> list[str]:
    """`old-X` tags that do not continue an X entity, rewritten as `new-X`; spans are kept."""
    out: list[str] = []
    previous = "O"
    for tag in tags:
        if tag.startswith(old + "-") and previous[2:] != tag[2:]:
            tag = new + tag[1:]
        out.append(tag)
        previous = tag
    return out
