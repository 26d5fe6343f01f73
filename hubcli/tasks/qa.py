"""Extractive question answering (SQuAD v1.1): start and end logits over the context tokens.

Contexts longer than `max_length` are cut into overlapping windows (doc stride); a window that
does not hold the whole answer is trained to point at the CLS token (index 0). Decoding takes
the best valid span over all windows of an example.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hubcli.errors import UsageError
from hubcli.tasks.metrics import squad_metrics
from hubcli.tasks.base import SEQUENCE_KEYS, Columns, Task, as_array, bounded_prefix, softmax
from hubcli.tasks.squad import Answer, QAExample, read_squad

if TYPE_CHECKING:
    import torch

MAX_ANSWER_TOKENS = 30
CLS_INDEX = 0


class QuestionAnswering(Task):
    name = "qa"
    head_type = "question_answering"
    primary_metric = "f1"
    formats = ("squad",)
    target_keys = ("start_positions", "end_positions")
    second_input = "context"

    def __init__(self, doc_stride: int | None = None) -> None:
        """`doc_stride`: tokens shared by neighbouring windows; None means max_length // 4."""
        super().__init__()
        self.doc_stride = doc_stride

    def read(self, path: Path, *, fmt: str | None = None,
             columns: Columns = Columns()) -> list[QAExample]:
        """Questions of a SQuAD v1.1 JSON file.

        Raises:
            DataError: see squad.read_squad().
            UsageError: `fmt` is not squad, the extension names another format (.tsv), or
                columns were given.
        """
        self.data_format(path, fmt)
        self._no_columns(columns)
        return read_squad(path)

    def label_names(self, examples: list[QAExample]) -> list[str]:
        return []

    def num_outputs(self, labels: list[str]) -> int:
        return 2

    def encode(self, examples: list[QAExample], tokenizer: Any, labels: list[str],
               max_length: int, *, with_targets: bool = True) -> list[dict]:
        """Windows over each context; `offsets` holds [start, end) characters of each context
        token and None for question and special tokens.

        Questions longer than half of `max_length` tokens are cut so the context keeps room;
        the stride is reduced where the room left would not allow it.
        """
        self.pad_id = tokenizer.pad_token_id or 0
        features = []
        for index, example in enumerate(examples):
            question = _clip(tokenizer, example.question, max_length // 2)
            room = (max_length - tokenizer.num_special_tokens_to_add(pair=True)
                    - len(tokenizer(question, add_special_tokens=False)["input_ids"]))
            stride = min(self.doc_stride or max_length // 4, room - 1)
            encoding = tokenizer(question, example.context, truncation="only_second",
                                 max_length=max_length, stride=stride,
                                 return_overflowing_tokens=True, return_offsets_mapping=True)
            for window in range(len(encoding["input_ids"])):
                offsets = [list(span) if sequence == 1 else None for span, sequence in
                           zip(encoding["offset_mapping"][window], encoding.sequence_ids(window))]
                feature = {key: encoding[key][window] for key in SEQUENCE_KEYS if key in encoding}
                feature.update(example_index=index, offsets=offsets)
                if with_targets:
                    start, end = _answer_tokens(offsets, example.answers[0])
                    feature.update(start_positions=start, end_positions=end)
                features.append(feature)
        return features

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean of the start and end cross-entropies; padding takes no probability mass, so a
        window's loss does not depend on what it is batched with."""
        import torch
        from torch.nn.functional import cross_entropy

        if "attention_mask" in batch:
            padding = (batch["attention_mask"] == 0).unsqueeze(-1)
            logits = logits.masked_fill(padding, torch.finfo(logits.dtype).min)
        start_logits, end_logits = logits.unbind(-1)
        return (cross_entropy(start_logits, batch["start_positions"])
                + cross_entropy(end_logits, batch["end_positions"])) / 2

    def decode(self, logits_per_feature: list, features: list[dict], examples: list[QAExample],
               labels: list[str]) -> list[dict]:
        """{"answer", "start", "end", "score"}: the span (character offsets into the context,
        end exclusive) with the highest P(start) * P(end), both taken over CLS and the window's
        context tokens, with end >= start and at most MAX_ANSWER_TOKENS tokens."""
        best: list[dict] = [{"answer": "", "start": 0, "end": 0, "score": 0.0} for _ in examples]
        for logits, feature in zip(logits_per_feature, features):
            values = as_array(logits)
            context = [i for i, span in enumerate(feature["offsets"]) if span is not None]
            if not context:
                continue
            keep = [CLS_INDEX, *context]
            score, first, last = _best_span(softmax(values[keep, 0])[1:],
                                            softmax(values[keep, 1])[1:])
            i = feature["example_index"]
            if score > best[i]["score"]:
                start = feature["offsets"][context[first]][0]
                end = feature["offsets"][context[last]][1]
                best[i] = {"answer": examples[i].context[start:end], "start": start, "end": end,
                           "score": score}
        return best

    def metrics(self, predictions: list[dict], examples: list[QAExample], labels: list[str]
                ) -> dict[str, float]:
        """exact_match and f1 against the best of each question's gold answers."""
        return squad_metrics([prediction["answer"] for prediction in predictions],
                             [[answer.text for answer in example.answers]
                              for example in examples])

    def parse_input(self, line: str, second: str | None = None) -> QAExample:
        """`question<TAB>context`, or the question alone with the context as `second`.

        Raises:
            UsageError: no context.
        """
        if second is not None:
            return QAExample(line, second)
        question, tab, context = line.partition("\t")
        if not tab:
            raise UsageError(f"question answering needs 'question<TAB>context', got "
                             f"{line[:80]!r}", hint="pass the context with --context TEXT, or "
                             "separate it from the question with a tab")
        return QAExample(question, context)

    def describe(self, pred: dict) -> str:
        return f"{pred['answer']!r} ({pred['start']}-{pred['end']}, {pred['score']:.3f})"


def _clip(tokenizer: Any, question: str, limit: int) -> str:
    """The question cut after its `limit`-th token."""
    question = bounded_prefix(tokenizer, question, limit)
    offsets = tokenizer(question, add_special_tokens=False,
                        return_offsets_mapping=True)["offset_mapping"]
    return question if len(offsets) <= limit else question[:offsets[limit - 1][1]]


def _answer_tokens(offsets: list, answer: Answer) -> tuple[int, int]:
    """First and last token of the answer in a window, or CLS twice if it is not all inside."""
    first_char, end_char = answer.start, answer.start + len(answer.text)
    context = [i for i, span in enumerate(offsets) if span is not None]
    if not context or offsets[context[0]][0] > first_char or offsets[context[-1]][1] < end_char:
        return CLS_INDEX, CLS_INDEX
    start = next(i for i in context if offsets[i][1] > first_char)
    end = next(i for i in reversed(context) if offsets[i][0] < end_char)
    return start, end


def _best_span(p_start: np.ndarray, p_end: np.ndarray) -> tuple[float, int, int]:
    """(p_start[s] * p_end[e], s, e) maximal over e - s in [0, MAX_ANSWER_TOKENS)."""
    best = (-1.0, 0, 0)
    n = len(p_start)
    for length in range(min(MAX_ANSWER_TOKENS, n)):
        products = p_start[:n - length] * p_end[length:]
        s = int(products.argmax())
        if products[s] > best[0]:
            best = (float(products[s]), s, s + length)
    return best
