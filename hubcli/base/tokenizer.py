"""A base's tokenizer straight from its `tokenizer.json`, without importing transformers.

transformers' top level costs about a second at start-up, which `hub predict` on one sentence
cannot afford; for BERT's WordPiece tokenizer (the packaged base and every plain BERT folder)
the `tokenizers` library does all the work anyway. `FastTokenizer` answers the part of
transformers' tokenizer call that the tasks and tests use, with the same ids, offsets, word and
sequence ids (tests/test_tokenizer.py compares them on the packaged base); other tokenizers
still load through transformers (`hubcli.base.load.load_tokenizer`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from hubcli.format.base_identity import is_bert_tokenizer, special_tokens

# The inputs a BERT tokenizer returns.
BERT_INPUTS = ("input_ids", "token_type_ids", "attention_mask")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.txt")


def supports(path: Path) -> bool:
    """Whether `path` holds a tokenizer.json of a BERT tokenizer this class can stand in for."""
    return is_bert_tokenizer(path)


class Encoding(dict):
    """The result of a call: the model inputs (and offsets) by name, as transformers'
    BatchEncoding has them, plus each window's word and sequence ids."""

    def __init__(self, data: dict[str, Any], encodings: list) -> None:
        super().__init__(data)
        self._encodings = encodings

    def word_ids(self, index: int = 0) -> list[int | None]:
        return self._encodings[index].word_ids

    def sequence_ids(self, index: int = 0) -> list[int | None]:
        return self._encodings[index].sequence_ids


class FastTokenizer:
    """A BERT tokenizer from `tokenizer.json`, called like transformers' fast tokenizer."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self.path = Path(path)
        self.backend_tokenizer = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        # transformers sets truncation and padding per call; the file's own settings must not leak
        self.backend_tokenizer.no_truncation()
        self.backend_tokenizer.no_padding()
        self.special_tokens_map = special_tokens(self.path)
        self.pad_token_id = self.backend_tokenizer.token_to_id(
            self.special_tokens_map.get("pad_token", "[PAD]")) or 0

    def get_vocab(self) -> dict[str, int]:
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        return self.backend_tokenizer.post_processor.num_special_tokens_to_add(pair)

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [self.backend_tokenizer.id_to_token(i) for i in ids]

    def save_pretrained(self, directory: Path) -> None:
        """Copy the tokenizer's files into `directory` (a model folder being written)."""
        for name in TOKENIZER_FILES:
            if (self.path / name).is_file():
                shutil.copyfile(self.path / name, Path(directory) / name)

    def __call__(self, text, text_pair=None, *, add_special_tokens: bool = True,
                 truncation: bool | str = False, max_length: int | None = None, stride: int = 0,
                 is_split_into_words: bool = False, return_overflowing_tokens: bool = False,
                 return_offsets_mapping: bool = False, padding: bool = False,
                 return_tensors: str | None = None) -> Encoding:
        """Encode one text (pair) or a batch, as transformers does for these arguments: a
        single input without overflow gives flat lists, otherwise one list per window."""
        batched = isinstance(text, (list, tuple)) and bool(text) and (
            isinstance(text[0], (list, tuple)) if is_split_into_words else True)
        if batched:
            inputs = list(zip(text, text_pair)) if text_pair is not None else list(text)
        else:  # as transformers: an empty second text is no second text
            inputs = [(text, text_pair) if text_pair else text]
        self._truncate(truncation, max_length, stride)
        encodings = self.backend_tokenizer.encode_batch(
            inputs, add_special_tokens=add_special_tokens, is_pretokenized=is_split_into_words)
        windows, sample = [], []
        for i, encoding in enumerate(encodings):
            more = encoding.overflowing if return_overflowing_tokens else []
            windows += [encoding, *more]
            sample += [i] * (1 + len(more))
        data = self._columns(windows, return_offsets_mapping, padding)
        if return_overflowing_tokens:
            data["overflow_to_sample_mapping"] = sample
        if return_tensors == "pt":
            import torch

            data = {key: torch.tensor(value) for key, value in data.items()}
        elif not batched and not return_overflowing_tokens:
            data = {key: value[0] for key, value in data.items()}
        return Encoding(data, windows)

    def _truncate(self, truncation: bool | str, max_length: int | None, stride: int) -> None:
        if not truncation or max_length is None:
            self.backend_tokenizer.no_truncation()
            return
        strategy = "longest_first" if truncation is True else truncation
        self.backend_tokenizer.enable_truncation(max_length, stride=stride, strategy=strategy)

    def _columns(self, windows: list, offsets: bool, padding: bool) -> dict[str, list]:
        width = max((len(w.ids) for w in windows), default=0) if padding else 0
        data: dict[str, list] = {key: [] for key in BERT_INPUTS}
        if offsets:
            data["offset_mapping"] = []
        for w in windows:
            pad = max(0, width - len(w.ids))
            data["input_ids"].append(list(w.ids) + [self.pad_token_id] * pad)
            data["token_type_ids"].append(list(w.type_ids) + [0] * pad)
            data["attention_mask"].append(list(w.attention_mask) + [0] * pad)
            if offsets:
                data["offset_mapping"].append(list(w.offsets) + [(0, 0)] * pad)
        return data
