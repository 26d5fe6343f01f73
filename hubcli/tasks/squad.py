"""SQuAD v1.1 JSON reader: data[].paragraphs[].{context, qas[].{id, question, answers[]}}.

JSON gives no line numbers past parsing, so structural errors name their place in the document
(`data[0].paragraphs[3].qas[1]`) instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hubcli.errors import DataError
from hubcli.tasks.base import read_text


@dataclass(frozen=True)
class Answer:
    text: str
    start: int  # character offset in the context


@dataclass(frozen=True)
class QAExample:
    """A question about a context; training uses the first answer, evaluation all of them."""

    question: str
    context: str
    answers: tuple[Answer, ...] = ()
    id: str | None = None
    path: str | None = None


def read_squad(path: Path) -> list[QAExample]:
    """Every question of a SQuAD v1.1 file.

    Raises:
        DataError: not JSON (names the line), a field missing or of the wrong type, an answer
            not found at its answer_start, or a question without answers (names where).
    """
    try:
        document = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise DataError(f"not valid JSON: {e.msg} at column {e.colno}", path=str(path),
                        line=e.lineno) from None
    examples = []
    for a, article in enumerate(_get(document, "data", list, "", path)):
        for p, paragraph in enumerate(_get(article, "paragraphs", list, f"data[{a}]", path)):
            where = f"data[{a}].paragraphs[{p}]"
            context = _get(paragraph, "context", str, where, path)
            for q, qa in enumerate(_get(paragraph, "qas", list, where, path)):
                examples.append(_example(qa, context, f"{where}.qas[{q}]", path))
    if not examples:
        raise DataError("no questions", path=str(path))
    return examples


def _example(qa: Any, context: str, where: str, path: Path) -> QAExample:
    question = _get(qa, "question", str, where, path)
    answers = tuple(_answer(answer, context, f"{where}.answers[{k}]", path)
                    for k, answer in enumerate(_get(qa, "answers", list, where, path)))
    if not answers:
        raise DataError(f"{where}: no answers", path=str(path),
                        hint="unanswerable (SQuAD v2) questions are not supported")
    return QAExample(question, context, answers, str(qa.get("id", where)), str(path))


def _answer(answer: Any, context: str, where: str, path: Path) -> Answer:
    text = _get(answer, "text", str, where, path)
    start = _get(answer, "answer_start", int, where, path)
    if not text or context[start:start + len(text)] != text:
        raise DataError(f"{where}: answer {text!r} is not at answer_start {start} of the context",
                        path=str(path), hint="answer_start is the character offset of the "
                                             "answer text in the context")
    return Answer(text, start)


def _get(obj: Any, key: str, kind: type, where: str, path: Path) -> Any:
    """obj[key], checked to be of `kind`.

    Raises:
        DataError: obj is not an object, lacks the key, or the value is of another type.
    """
    place = f"{where}.{key}" if where else key
    if not isinstance(obj, dict) or key not in obj:
        raise DataError(f"{place} is missing", path=str(path),
                        hint="expected SQuAD v1.1 JSON: data[].paragraphs[].qas[]")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise DataError(f"{place} is {type(value).__name__}, expected {kind.__name__}",
                        path=str(path), hint="expected SQuAD v1.1 JSON: data[].paragraphs[].qas[]")
    return value
