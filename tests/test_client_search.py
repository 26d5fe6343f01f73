"""hub search against a real registry on localhost: filters, --base resolution, output."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from factories import make_signed_bundle

from hubcli.remote import client as remote_api
from hubcli.base.ref import base_filter, packaged_base_hash
from hubcli.cli.main import cli
from hubcli.errors import RegistryError, UsageError
from hubcli.remote.client import SearchFilters
from hubcli.signing.sign import create_signing_key

OTHER_BASE = "sha256:" + "ef" * 32
NER_HEAD = {"type": "token_classification", "num_outputs": 3, "labels": ["O", "B-PER", "I-PER"]}


@pytest.fixture(scope="module")
def catalogue(live_registry, tmp_path_factory):
    """One user's three adapters: sentiment on the packaged base, sentiment on another base,
    and NER on the packaged base. Yields (remote, user)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HUB_HOME", str(tmp_path_factory.mktemp("publisher")))
        yield _publish(live_registry, tmp_path_factory)


def _publish(live_registry, tmp_path_factory):
    user = "searcher"
    remote = remote_api.Remote(live_registry.url, live_registry.create_user(user),
                               progress=False)
    create_signing_key(name=user)
    remote_api.upload_own_key(remote)
    folder = tmp_path_factory.mktemp("bundles")
    packaged = {"name": "sentence-transformers/all-MiniLM-L6-v2",
                "content_hash": packaged_base_hash()}
    for name, base, extra in [
            ("sst2-minilm", packaged, {"description": "Movie review sentiment."}),
            ("sst2-other", {"name": "org/other-bert", "content_hash": OTHER_BASE},
             {"description": "Sentiment on another base.", "tags": ["sentiment", "en"]}),
            ("ner-minilm", packaged, {"task": "tagging", "head": NER_HEAD, "tags": ["ner"],
                                      "description": "Person names."})]:
        remote_api.push_bundle(remote, make_signed_bundle(folder / name, name=name,
                                                          base_model=base, **extra))
    return remote, user


def ids(page) -> list[str]:
    return sorted(a["id"] for a in page["items"])


def test_search_filters(catalogue):
    remote, user = catalogue
    find = lambda **kw: ids(remote_api.search(remote, SearchFilters(namespace=user, **kw)))  # noqa: E731
    assert find() == [f"{user}/ner-minilm", f"{user}/sst2-minilm", f"{user}/sst2-other"]
    assert find(text="sentiment") == [f"{user}/sst2-minilm", f"{user}/sst2-other"]
    assert find(task="tagging") == [f"{user}/ner-minilm"]
    assert find(head_type="sequence_classification") == [f"{user}/sst2-minilm",
                                                          f"{user}/sst2-other"]
    assert find(base_hash=packaged_base_hash()) == [f"{user}/ner-minilm", f"{user}/sst2-minilm"]
    assert find(base_model="org/other-bert") == [f"{user}/sst2-other"]
    assert find(tags=("sentiment", "en")) == [f"{user}/sst2-other"]
    assert find(text="sentiment", base_hash=packaged_base_hash()) == [f"{user}/sst2-minilm"]


def test_base_filter_resolution(tmp_path):
    assert base_filter("minilm") == (packaged_base_hash(), None)
    assert base_filter(OTHER_BASE) == (OTHER_BASE, None)
    assert base_filter("org/unknown-bert") == (None, "org/unknown-bert")


def test_base_filter_from_a_local_folder_and_ambiguity(tmp_path, monkeypatch):
    from hubcli.base.ref import packaged_base_path

    assert base_filter(str(packaged_base_path())) == (packaged_base_hash(), None)
    monkeypatch.setattr("hubcli.base.ref._remembered_bases", lambda: {
        "sha256:" + "01" * 32: {"name": "minilm-finetuned", "path": "/x"}})
    with pytest.raises(UsageError, match="matches several local bases"):
        base_filter("minilm")


def test_search_cli_table_and_json(catalogue):
    remote, user = catalogue
    common = ["--namespace", user, "--registry", remote.endpoint]
    result = CliRunner().invoke(cli, ["search", "sentiment", "--base", "minilm", *common])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["adapter", "version", "task", "base", "downloads",
                                "description"]
    assert lines[2].split()[:5] == [f"{user}/sst2-minilm", "1.0.0", "classification",
                                    "sentence-transformers/all-MiniLM-L6-v2", "0"]
    assert lines[-1] == "(1 of 1)"
    page = json.loads(CliRunner().invoke(cli, ["search", "--task", "tagging", "--json",
                                               *common]).stdout)
    assert [(a["id"], a["tags"], a["head_type"]) for a in page["items"]] == [
        (f"{user}/ner-minilm", ["ner"], "token_classification")]
    assert page["total"] == 1
    empty = CliRunner().invoke(cli, ["search", "no-such-words", *common])
    assert empty.stdout == "no adapters found\n"


def test_search_needs_our_registry(catalogue):
    remote, _ = catalogue
    with pytest.raises(RegistryError, match="unknown sort 'stars'"):
        remote_api.search(remote, SearchFilters(sort="stars"))
    hub = remote_api.Remote("https://huggingface.co", kind="hf")
    with pytest.raises(UsageError, match="the Hugging Face Hub has no registry API"):
        remote_api.search(hub, SearchFilters())
