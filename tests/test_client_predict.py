"""`hub predict NS/NAME[@VERSION]` pulls when needed and then works offline; on another
machine the adapter attaches once its signer is trusted. A tiny random BERT keeps it fast."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hubcli.remote import client as remote_api
from hubcli.cli.main import cli
from hubcli.data import sample_dataset
from hubcli.signing.keys import public_key_path


def run(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


@pytest.fixture(scope="module")
def published(tiny_base_dir, live_registry, tmp_path_factory):
    """A tiny sentiment adapter trained, bundled, signed and pushed by user `trainer`, who
    keeps their HUB_HOME. Yields (repo id, trainer's HUB_HOME, token)."""
    home = tmp_path_factory.mktemp("trainer_home")
    out = tmp_path_factory.mktemp("runs") / "tiny-sst"
    train, dev = sample_dataset()
    token = live_registry.create_user("trainer")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HUB_HOME", str(home))
        steps = [("train", "--base", tiny_base_dir, "--train", train, "--validation", dev,
                  "--out", out, "--epochs", 1, "--bottleneck", 8, "--max-length", 32, "--quiet"),
                 ("keygen", "--name", "trainer"), ("bundle", out), ("sign", out),
                 ("login", "--registry", live_registry.url, "--token", token),
                 ("keys", "upload"), ("push", out, "--quiet")]
        for step in steps:
            result = run(*step)
            assert result.exit_code == 0, (step, result.output)
    yield "trainer/tiny-sst", home, token


def test_predict_pulls_when_needed_then_works_offline(published, live_registry, monkeypatch):
    repo_id, home, token = published
    monkeypatch.setenv("HUB_HOME", str(home))
    result = run("predict", f"{repo_id}@0.1.0", "a gripping film", "--json")
    assert result.exit_code == 0, result.output
    assert f"pulled {repo_id}@0.1.0 into " in result.stderr
    assert json.loads(result.stdout)["label"] in ("negative", "positive")
    monkeypatch.setenv("HUB_ENDPOINT", "http://127.0.0.1:9")  # the registry is gone
    again = run("predict", "a dull film")  # no adapter named: the last pulled
    assert again.exit_code == 0, again.output
    assert f"using the last adapter pulled: {repo_id}@0.1.0" in again.stderr
    assert "verified: " in again.stderr and "signed by trainer" in again.stderr


def test_another_machine_attaches_once_it_trusts_the_signer(published, live_registry,
                                                            tmp_path, monkeypatch):
    repo_id, home, _ = published
    signer_key = (home / "keys" / public_key_path().name).read_bytes()
    monkeypatch.setenv("HUB_HOME", str(tmp_path / "elsewhere"))
    (tmp_path / "trainer.pub.pem").write_bytes(signer_key)
    assert run("trust", "add", tmp_path / "trainer.pub.pem", "--name", "trainer").exit_code == 0
    assert run("pull", repo_id, "--registry", live_registry.url).exit_code == 0
    result = run("predict", "a gripping film")
    assert result.exit_code == 0, result.output
    assert "signed by trainer" in result.stderr


def test_another_machine_trusts_the_registry_key_for_the_namespace(published, live_registry,
                                                                   tmp_path, monkeypatch):
    repo_id, _, _ = published
    monkeypatch.setenv("HUB_HOME", str(tmp_path / "elsewhere"))
    remote = remote_api.Remote(live_registry.url, progress=False)
    from hubcli.remote.pull import pull

    pull(repo_id, remote)
    result = run("predict", "a gripping film")
    assert result.exit_code == 0, result.output
    assert "signed by" in result.stderr
