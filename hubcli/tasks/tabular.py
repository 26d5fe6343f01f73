"""CSV, TSV and JSONL readers for sentence(-pair) tasks, with column lookup by name.

Column names match case-insensitively. Without a flag, the text column is the first of
TEXT_DEFAULTS present, the pair column the first of PAIR_DEFAULTS present (none if absent), and
the label column the first of LABEL_DEFAULTS present. Line numbers are 1-based lines of the file;
a CSV record spanning several lines is reported at its first line.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hubcli.errors import DataError
from hubcli.tasks.base import Columns, read_lines

TEXT_DEFAULTS = ("sentence", "text", "sentence1", "question", "question1", "premise", "review",
                 "content")
PAIR_DEFAULTS = ("sentence2", "text_pair", "text_b", "question2", "hypothesis")
LABEL_DEFAULTS = ("label", "labels", "score")
FORMATS = ("csv", "tsv", "jsonl")


@dataclass(frozen=True)
class Row:
    """One record's chosen cells. `label` is a string for CSV/TSV, any JSON scalar for JSONL."""

    text: str
    pair: str | None
    label: Any
    line: int


def read_rows(path: Path, fmt: str, columns: Columns) -> Iterator[Row]:
    """The text, pair and label cells of every record of a CSV, TSV or JSONL file, read as a
    stream (memory bounded by one record besides what the caller keeps).

    TSV is read without quote handling (as GLUE's files are written), so quotes in a sentence
    stay as they are; a field cannot hold a tab or a line break.

    Raises:
        DataError: the file is missing, empty or malformed, a column is missing, a cell is not
            text, or a label is empty (names the file and line).
    """
    records = _jsonl(path) if fmt == "jsonl" else _delimited(path, fmt)
    header = next(records)
    keys = None
    for line, record in records:
        if keys is None:
            keys = _keys(header, columns, path)
        yield _row(record, line, *keys, path)
    if keys is None:
        raise DataError("no examples after the header", path=str(path), line=header.line)


def _keys(header: _Header, columns: Columns, path: Path) -> tuple[str, str | None, str]:
    text_key = _find(header, columns.text, TEXT_DEFAULTS, "text", path)
    pair_key = _find(header, columns.pair, PAIR_DEFAULTS, "text-pair", path, optional=True,
                     taken=(text_key,))
    label_key = _find(header, columns.label, LABEL_DEFAULTS, "label", path,
                      taken=(text_key, pair_key))
    return text_key, pair_key, label_key


@dataclass(frozen=True)
class _Header:
    names: list[str]
    line: int


def _delimited(path: Path, fmt: str) -> Iterator[Any]:
    """The header, then (line, record) per record."""
    dialect: dict[str, Any] = ({"delimiter": "\t", "quoting": csv.QUOTE_NONE} if fmt == "tsv"
                               else {"delimiter": ",", "strict": True})
    reader = csv.reader((line for _, line in read_lines(path)), **dialect)
    header: _Header | None = None
    end = 0
    try:
        for cells in reader:
            start, end = end + 1, reader.line_num
            if not any(cell.strip() for cell in cells):
                continue
            if header is None:
                header = _Header([cell.strip() for cell in cells], start)
                yield header
            elif len(cells) != len(header.names):
                raise DataError(f"expected {len(header.names)} fields like the header, found "
                                f"{len(cells)}", path=str(path), line=start,
                                hint=_FIELD_HINT[fmt])
            else:
                yield start, dict(zip(header.names, cells))
    except csv.Error as e:
        raise DataError(f"malformed {fmt.upper()}: {e}", path=str(path), line=reader.line_num,
                        hint=_FIELD_HINT[fmt]) from None


_FIELD_HINT = {"csv": "put double quotes around fields that hold commas, quotes or line breaks",
               "tsv": "TSV fields cannot hold tabs or line breaks; use CSV or JSONL for such text"}


def _jsonl(path: Path) -> Iterator[Any]:
    """A header (the first object's keys: JSONL has no header line), then (line, record)."""
    first = True
    for number, line in read_lines(path):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"not valid JSON: {e.msg} at column {e.colno}", path=str(path),
                            line=number, hint="JSONL needs one JSON object per line") from None
        if not isinstance(value, dict):
            raise DataError(f"expected a JSON object, found {type(value).__name__}",
                            path=str(path), line=number,
                            hint="JSONL needs one JSON object per line") from None
        if first:
            yield _Header(list(value), number)
            first = False
        yield number, value


def _find(header: _Header, wanted: str | None, defaults: tuple[str, ...], flag: str, path: Path,
          *, optional: bool = False, taken: tuple[str | None, ...] = ()) -> str | None:
    """The header name for a column: the flag's value, else the first default present.

    Raises:
        DataError: a named column is absent, or no default is present and the column is needed.
    """
    by_lower = {}
    for name in header.names:
        by_lower.setdefault(name.lower(), name)
    listed = ", ".join(header.names)
    if wanted is not None:
        if wanted.lower() in by_lower:
            return by_lower[wanted.lower()]
        raise DataError(f"column {wanted!r} not found; columns are: {listed}", path=str(path),
                        line=header.line, hint=_column_hint(header, flag, defaults, taken))
    for default in defaults:
        if default in by_lower and by_lower[default] not in taken:
            return by_lower[default]
    if optional:
        return None
    raise DataError(f"no {flag} column (looked for {', '.join(defaults)}); columns are: "
                    f"{listed}", path=str(path), line=header.line,
                    hint=_column_hint(header, flag, defaults, taken))


def _column_hint(header: _Header, flag: str, defaults: tuple[str, ...],
                 taken: tuple[str | None, ...]) -> str:
    """Which columns could serve: those no other role took; with none left, say to add one
    (never suggest the text column as the label)."""
    free = [name for name in header.names if name not in taken]
    if not free:
        return (f"the file has no column besides {', '.join(n for n in taken if n)}: add a "
                f"{flag} column (the header {defaults[0]!r} is found without a flag)")
    if len(free) == 1:
        return f"pass --{flag}-column {free[0]}"
    return f"pass --{flag}-column with one of: {', '.join(free)}"


def _row(record: dict, line: int, text_key: str, pair_key: str | None, label_key: str,
         path: Path) -> Row:
    def cell(key: str) -> Any:
        if key not in record:
            raise DataError(f"key {key!r} missing", path=str(path), line=line)
        return record[key]

    def text_cell(key: str) -> str:
        value = cell(key)
        if not isinstance(value, str):
            raise DataError(f"{key!r} is {json.dumps(value)}, not a string", path=str(path),
                            line=line)
        return value

    label = cell(label_key)
    if label is None or (isinstance(label, str) and not label.strip()):
        raise DataError(f"empty {label_key!r}", path=str(path), line=line,
                        hint="every example needs a label")
    pair = text_cell(pair_key) if pair_key is not None else None
    return Row(text_cell(text_key), pair, label.strip() if isinstance(label, str) else label, line)
