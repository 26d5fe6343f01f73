"""`hub pull` of a composed adapter brings its components; `hub verify` reports the tree;
attaching finds them in the pull cache without the network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from factories import FUSION, make_signed_bundle, requirement

from hubcli.cli.main import cli
from hubcli.errors import ComponentError
from hubcli.remote import client as remote_api
from hubcli.remote import pull_records as pulled
from hubcli.remote.pull import pull
from hubcli.settings import load_config
from hubcli.signing.sign import create_signing_key


@pytest.fixture
def published(remote, registry_user, tmp_path):
    """The user's sst2 and stsb, and a fusion over both pinned by reference; the local copies
    pulled records know nothing about."""
    user = registry_user[0]
    create_signing_key(name=user)
    remote_api.upload_own_key(remote)
    parts = {}
    for seed, name in enumerate(["sst2", "stsb"]):
        parts[name] = make_signed_bundle(tmp_path / "made" / name, name=name, seed=seed)
        remote_api.push_bundle(remote, parts[name])
    fusion = make_signed_bundle(tmp_path / "made" / "fusion", name="fusion", architecture=FUSION,
                                requires=[requirement(parts[n], ref=f"{user}/{n}")
                                          for n in ("sst2", "stsb")])
    remote_api.push_bundle(remote, fusion)
    return user, parts


def files_of(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir())}


def test_pulling_a_fusion_pulls_its_components(remote, published):
    user, parts = published
    result = pull(f"{user}/fusion", remote)
    assert [c.ref for c in result.components] == [f"{user}/sst2@1.0.0", f"{user}/stsb@1.0.0"]
    for c, name in zip(result.components, ("sst2", "stsb")):
        assert files_of(c.path) == files_of(parts[name])
        assert pulled.find(f"{user}/{name}", "1.0.0") == c
    assert load_config()["last_pulled"] == f"{user}/fusion@1.0.0"
    # pulled again: the components are found, not fetched
    assert [c.path for c in pull(f"{user}/fusion", remote).components] == \
        [c.path for c in result.components]


def test_attaching_a_pulled_fusion_finds_components_offline(remote, published, monkeypatch):
    from hubcli.local.attach import verify_adapter
    from hubcli.remote import pull as pull_module

    user, _ = published
    record = pull(f"{user}/fusion", remote).record

    def offline(*_a, **_k):
        raise AssertionError("no network for components pulled already")

    monkeypatch.setattr(pull_module, "pull", offline)
    bundle = verify_adapter(Path(record.path))
    assert [Path(c.directory) for c in bundle.components] == [
        Path(pulled.find(f"{user}/{n}", "1.0.0").path) for n in ("sst2", "stsb")]
    assert all(c.status == "trusted" for c in bundle.components)


def test_a_component_pulled_with_another_digest_is_refused(remote, published, tmp_path):
    user, parts = published
    result = pull(f"{user}/fusion", remote)
    # another sst2 1.0.0, signed by a trusted key, where the pulled one was
    other = make_signed_bundle(tmp_path / "other" / "sst2", name="sst2", seed=7)
    for f in other.iterdir():
        (Path(result.components[0].path) / f.name).write_bytes(f.read_bytes())
    from hubcli.local.attach import verify_adapter

    with pytest.raises(ComponentError, match=f"component {user}/sst2@1.0.0: .* holds sst2 1.0.0 "
                                             "with manifest sha256 "):
        verify_adapter(Path(result.record.path))


def test_pull_and_verify_cli_show_the_tree(remote, published, monkeypatch):
    user, _ = published
    monkeypatch.setenv("HUB_ENDPOINT", remote.endpoint)
    monkeypatch.setenv("HUB_TOKEN", remote.token)
    r = CliRunner().invoke(cli, ["pull", f"{user}/fusion", "--quiet"])
    assert r.exit_code == 0, r.output
    assert f"  requires {user}/sst2@1.0.0: " in r.stdout
    path = pulled.find(f"{user}/fusion", "1.0.0").path
    r = CliRunner().invoke(cli, ["verify", path, "--json"])
    assert r.exit_code == 0, r.output
    tree = json.loads(r.stdout)["components"]
    assert [(c["name"], c["status"]) for c in tree] == [("sst2", "trusted"), ("stsb", "trusted")]
    r = CliRunner().invoke(cli, ["verify", path])
    assert "  requires stsb 1.0.0: " in r.stdout and "manifest sha256 as pinned" in r.stdout


def test_a_server_loads_a_registry_fusion_on_its_first_request(
        remote, published, registry_user, live_registry, tiny_base_dir, monkeypatch):
    """`hub serve --allow-pull`: a request for a fusion on the registry pulls it with its
    components, verified, and answers as the fusion predicts alone."""
    from hubcli.api import AdapterHub
    from hubcli.serving.engine import Engine, Job
    from hubcli.serving.pool import Pool

    monkeypatch.setenv("HUB_ENDPOINT", live_registry.url)  # the server's default registry
    monkeypatch.setenv("HUB_TOKEN", registry_user[1])
    user, _parts = published
    pool = Pool(Engine(str(tiny_base_dir), allow_base_mismatch=True), allow_pull=True)
    ref = f"{user}/fusion"
    assert pool.acquire(ref) is None  # not attached: loaded on demand
    slot = pool.fetch(ref).result(timeout=120)
    assert pool.acquire(ref) == slot and list(pool.listing()) == ["__base__", ref]
    texts = ["a gripping film", "dull"]
    served = pool.engine.run([Job(slot, texts, 0), Job("__base__", texts[:1], 0)])[0]
    hub = AdapterHub(str(tiny_base_dir))
    hub.load(pulled.find(ref, "1.0.0").path, allow_base_mismatch=True)
    assert [{k: v for k, v in p.items() if k != "text"} for p in served] == hub.predict(texts)
    assert set(pool.engine.hub.model.infos) >= {"sst2", "stsb"}  # its components, attached
