"""Token classification (named entities): IOB tags per word, predicted at each word's first
sub-token, learnt in IOB1, decoded as the best sequence IOB1 allows (tasks/lattice.py) and put
out as IOB2. Sentences longer than `max_length` tokens are split into consecutive windows.

Why IOB1 for learning, whatever the file's scheme: an entity's words then mostly share one label
(I-X), and B-X appears only between two adjacent X entities, so the model need not also learn
where every entity begins. Learning IOB2 labels instead cost about 6 entity-F1 points on
CoNLL-2003 and 16 on WNUT-17 (0.26 vs 0.42 at the same budget), for the peer library too. The
conversion is lossless: the spans are the same in both schemes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hubcli.tasks.metrics import entity_metrics, entity_spans
from hubcli.tasks.base import (IGNORE_INDEX, SEQUENCE_KEYS, Columns, Task, as_array, log_softmax,
                               unknown_label)
from hubcli.tasks.conll import TaggedSentence, read_conll, to_iob1, to_iob2
from hubcli.tasks.lattice import best_paths

if TYPE_CHECKING:
    import torch


class Tagging(Task):
    name = "tagging"
    head_type = "token_classification"
    primary_metric = "f1"
    formats = ("conll",)
    tokens_per_batch: float | None = None  # set by fit_loss()
    loss_sums = True  # over tokens_per_batch
    # Length-pooled batches cost ~1 F1 point on a set mixing short lines and long sentences
    # (0.952 -> 0.961, even with the token-weighted loss): plain shuffled batches instead.
    bucket_by_length = False
    label_scheme = "IOB1"  # learnt in (see above); decoded in its lattice (tasks/lattice.py)
    # An adapter's two projections each get gradients in proportion to the other's weights; from
    # 1e-3 tagging's adapters moved slowly: on WNUT-17 entity F1 stayed at 0.00 for two epochs
    # at seed 1 and for all three at seed 2, and on the synthetic set hub ended 0.6 points behind
    # the peer, whose adapters start at 2e-2 (BERT's init). With 2e-2, WNUT seeds 0-2: 0.460,
    # 0.457, 0.460 (0.468, 0.399, 0.000 before); synthetic mean of seeds 0-2 0.9676 (0.9625
    # before; peer 0.9683).
    adapter_init_scale = 2e-2
    # The bottleneck reads LN(h + x), past the sublayer's residual add and LayerNorm (Pfeiffer
    # et al.'s form, at both of Houlsby's sites), instead of the sublayer's output h: synthetic
    # set, seeds 0-4, entity F1 0.9781 mean against 0.9675 (peer 0.9693); on WNUT-17 (seeds 0-2)
    # 1.3 points lower, 0.4465 against 0.4592 (peer 0.4120 at seed 0), still above the peer.
    adapter_reads = "normed"

    def read(self, path: Path, *, fmt: str | None = None,
             columns: Columns = Columns()) -> list[TaggedSentence]:
        """Sentences of a CoNLL file.

        Raises:
            DataError: see conll.read_conll().
            UsageError: `fmt` is not conll, the extension names another format (.tsv), or
                columns were given.
        """
        self.data_format(path, fmt)
        self._no_columns(columns)
        return read_conll(path)

    def label_names(self, examples: list[TaggedSentence]) -> list[str]:
        """"O", then B- and I- of every entity type seen, sorted."""
        kinds = {tag[2:] for example in examples for tag in example.tags or () if tag != "O"}
        return ["O", *sorted(f"{prefix}-{kind}" for kind in kinds for prefix in "BI")]

    def num_outputs(self, labels: list[str]) -> int:
        return len(labels)

    def encode(self, examples: list[TaggedSentence], tokenizer: Any, labels: list[str],
               max_length: int, *, with_targets: bool = True) -> list[dict]:
        """Features whose `word_ids` give the word index at each word's first sub-token.

        Other sub-tokens and special tokens get None there and IGNORE_INDEX as label. A word
        the tokenizer turns into no token at all gets no prediction (decoded as "O").

        Raises:
            DataError: a tag is not in `labels` (names the file and the word's line).
        """
        self.pad_id = tokenizer.pad_token_id or 0
        features = []
        for index, example in enumerate(examples):
            targets = self._tag_ids(example, labels) if with_targets else []
            encoding = tokenizer(list(example.words), is_split_into_words=True, truncation=True,
                                 max_length=max_length, return_overflowing_tokens=True)
            seen: set[int] = set()  # windows do not overlap, so a word's first token is unique
            for window in range(len(encoding["input_ids"])):
                word_ids = []
                for word in encoding.word_ids(window):
                    first = word is not None and word not in seen
                    word_ids.append(word if first else None)
                    seen.add(word)
                feature = {key: encoding[key][window] for key in SEQUENCE_KEYS if key in encoding}
                feature.update(example_index=index, word_ids=word_ids)
                if with_targets:
                    feature["labels"] = [IGNORE_INDEX if w is None else targets[w]
                                         for w in word_ids]
                features.append(feature)
        return features

    def fit_loss(self, features: list[dict], batch_size: int) -> None:
        """Divide every batch's summed token loss by the same number: the labelled tokens of an
        average batch. A per-batch mean would give each token of a length-bucketed batch of
        three-word headlines ten times the weight of a token in a batch of long sentences, so
        short lines would dominate training (about 5 F1 points lost on CoNLL-2003)."""
        labelled = sum(sum(label != IGNORE_INDEX for label in f["labels"]) for f in features)
        self.tokens_per_batch = max(1.0, batch_size * labelled / max(1, len(features)))

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Summed token loss over fit_loss()'s fixed normaliser; before fit_loss() (a batch
        scored on its own), over this batch's labelled tokens. A batch without any is 0."""
        from torch.nn.functional import cross_entropy

        labels = batch["labels"].reshape(-1)
        total = cross_entropy(logits.reshape(-1, logits.size(-1)), labels,
                              ignore_index=IGNORE_INDEX, reduction="sum")
        normaliser = self.tokens_per_batch or max(1, int((labels != IGNORE_INDEX).sum()))
        return total / normaliser

    def decode(self, logits_per_feature: list, features: list[dict],
               examples: list[TaggedSentence], labels: list[str]) -> list[dict]:
        """{"entities": [{"text", "type", "start", "end", "score"}], "tags": [IOB2 tag per word]}.

        Each sentence's tags are the most probable sequence the head's `label_scheme` allows
        (lattice.best_paths; greedy per word when no scheme is recorded), put out as IOB2:
        to_iob2 rewrites IOB1 without moving any entity. A word with no token of its own is
        "O". start/end are character offsets into the example's text (end exclusive); an
        entity's score is the mean probability of its words' tags.
        """
        # a word with no prediction: "O" (unconstrained where the labels have no "O", or one
        # such word would leave its sentence no path)
        none = (np.where(np.array(labels) == "O", 0.0, -np.inf) if "O" in labels
                else np.zeros(len(labels)))
        log_probs = [np.tile(none, (len(example.words), 1)) for example in examples]
        for logits, feature in zip(logits_per_feature, features):
            positions = [p for p, word in enumerate(feature["word_ids"]) if word is not None]
            words = [feature["word_ids"][p] for p in positions]
            log_probs[feature["example_index"]][words] = log_softmax(as_array(logits)[positions])
        out = []
        for example, scores, path in zip(examples, log_probs,
                                         best_paths(log_probs, labels, self.label_scheme)):
            tags = to_iob2([labels[i] for i in path])
            chosen = np.exp(scores[np.arange(len(path)), path])
            out.append({"entities": _entities(example, tags, chosen), "tags": tags})
        return out

    def metrics(self, predictions: list[dict], examples: list[TaggedSentence],
                labels: list[str]) -> dict[str, float]:
        """Entity-level precision, recall and f1 (exact span and type)."""
        return entity_metrics([example.tags for example in examples],
                              [prediction["tags"] for prediction in predictions])

    def parse_input(self, line: str, second: str | None = None) -> TaggedSentence:
        """The line's whitespace-separated words (tagging takes no second text)."""
        return TaggedSentence.from_text(line)

    def describe(self, pred: dict) -> str:
        found = [f"{e['text']} ({e['type']}, {e['start']}-{e['end']})" for e in pred["entities"]]
        return "; ".join(found) or "no entities"

    def _tag_ids(self, example: TaggedSentence, labels: list[str]) -> list[int]:
        """Label ids of the example's tags in IOB1, the scheme tagging learns in."""
        index = {tag: i for i, tag in enumerate(labels)}
        learnt = to_iob1(example.tags)
        for number, (given, tag) in enumerate(zip(example.tags, learnt)):
            if tag not in index:
                raise unknown_label(given, labels, what="tag", path=example.path,
                                    line=example.line + number)
        return [index[tag] for tag in learnt]


def _entities(example: TaggedSentence, tags: list[str], scores: np.ndarray) -> list[dict]:
    entities = []
    for kind, first, stop in entity_spans(tags):
        start, end = example.spans[first][0], example.spans[stop - 1][1]
        entities.append({"text": example.text[start:end], "type": kind, "start": start,
                         "end": end, "score": float(scores[first:stop].mean())})
    return entities
