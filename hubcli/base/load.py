"""Loading the frozen base: the packaged MiniLM by default, any local HF folder, or a Hub id
(where each is: `hubcli.base.ref`).

Every base loaded is remembered by content hash (`ref.remember_base`), so an adapter pulled
later can find the base it was trained on without the user naming it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from hubcli.base.hashing import content_hash, tokenizer_hash
from hubcli.base.ref import remember_base, resolve_base
from hubcli.core.targets import targets_for
from hubcli.errors import ModelError


@dataclass(frozen=True)
class BaseInfo:
    """Identity of a base model, as recorded in an adapter's manifest."""

    name: str
    path: str
    revision: str | None
    content_hash: str
    tokenizer_hash: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_parameters: int
    embedding_size: int | None = None

    def to_manifest(self) -> dict:
        d = asdict(self)
        d.pop("path")
        if d["embedding_size"] in (None, self.hidden_size):
            d.pop("embedding_size")
        return d


@dataclass
class LoadedBase:
    encoder: object  # transformers PreTrainedModel
    tokenizer: object  # base.tokenizer.FastTokenizer, or transformers' tokenizer
    info: BaseInfo


def read_config(model_dir: Path) -> dict:
    """The model folder's config.json.

    Raises:
        ModelError: it is missing or not JSON.
    """
    try:
        return json.loads((model_dir / "config.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError) as e:
        raise ModelError(f"{model_dir / 'config.json'}: missing or not JSON ({e})",
                         hint="point at a Hugging Face model folder") from None


def load_base(ref: str | None = None, *, revision: str | None = None) -> LoadedBase:
    """Load encoder and tokenizer, frozen and in eval mode, and identify them by content hash.

    Raises:
        ModelError: the base cannot be found or loaded.
        UnsupportedModelError: its model type has no adapter targets.
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    name, path = resolve_base(ref, revision)
    config = read_config(path)
    targets_for(config.get("model_type", "?"))  # refuse unsupported types before loading weights
    encoder = load_encoder(path, config)
    tokenizer = load_tokenizer(path)
    encoder.eval()
    info = BaseInfo(
        name=name, path=str(path), revision=revision, content_hash=content_hash(path),
        tokenizer_hash=tokenizer_hash(tokenizer), model_type=encoder.config.model_type,
        hidden_size=encoder.config.hidden_size, num_layers=encoder.config.num_hidden_layers,
        num_parameters=sum(p.numel() for p in encoder.parameters()),
        embedding_size=getattr(encoder.config, "embedding_size", None))
    remember_base(info.content_hash, info.name, info.path)
    return LoadedBase(encoder, tokenizer, info)


def load_encoder(path: Path, config: dict):
    """The encoder in `path`: the compact BERT when it covers the model, else `AutoModel`.

    Raises:
        ModelError: the weights cannot be read.
    """
    from hubcli.core import bert

    try:
        if bert.supports(config, path):
            return bert.CompactBert.from_pretrained(path, config)
        from transformers import AutoModel

        _quiet_transformers()
        return AutoModel.from_pretrained(path, attn_implementation="sdpa")
    except (OSError, ValueError, KeyError) as e:
        raise ModelError(f"could not load base model from {path}: {e}") from None


def load_tokenizer(path: Path):
    """The tokenizer in `path`: a BERT tokenizer straight from its tokenizer.json (no
    transformers import, see base/tokenizer.py), else transformers' class that
    tokenizer_config.json names (`AutoTokenizer` pulls in torch and more, ~1.5 s).

    Raises:
        ModelError: the tokenizer cannot be loaded.
    """
    from hubcli.base import tokenizer as fast

    if fast.supports(path):
        try:
            return fast.FastTokenizer(path)
        except Exception as e:  # the Rust parser raises plain Exception for a bad file
            raise ModelError(f"could not load the tokenizer from {path}: {e}") from None
    import transformers

    _quiet_transformers()
    try:
        named = json.loads((path / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, json.JSONDecodeError, AttributeError):
        named = None
    cls = getattr(transformers, named, None) if isinstance(named, str) and named.isidentifier() \
        else None
    try:
        return (cls or transformers.AutoTokenizer).from_pretrained(path)
    except (OSError, ValueError, TypeError) as e:
        raise ModelError(f"could not load the tokenizer from {path}: {e}") from None


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress output is enough
    hf_logging.set_verbosity_error()
