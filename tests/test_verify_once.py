"""`hub predict` verifies an adapter once: one verify step yields a `VerifiedBundle` that loading
and attaching use, so each file is hashed once and the manifest parsed and validated once."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from factories import make_signed_bundle

from hubcli.cli.main import cli


@pytest.fixture
def counts(monkeypatch) -> Counter:
    """Counts, per predict: files hashed (by name), manifest JSON decodes and schema
    validations, verify steps, weights headers read and weights loads."""
    import hubcli.format.bundle_rules as rules
    import hubcli.format.manifest as manifest_io
    import hubcli.format.safejson as safejson
    import hubcli.local.adapterdir as adapterdir
    import hubcli.signing.policy as policy

    seen: Counter = Counter()

    def counting(module, name: str, key=None):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            result = real(*args, **kwargs)
            seen[key(*args, result=result) if key else name] += 1
            return result
        monkeypatch.setattr(module, name, wrapper)

    counting(rules, "sha256_file", key=lambda path, **_k: f"hash {Path(path).name}")
    counting(safejson, "loads", key=lambda *_a, result: (
        "decode manifest" if isinstance(result, dict) and "base_model" in result else "other"))
    counting(manifest_io, "validate")
    counting(policy, "check_attach")
    counting(rules, "read_safetensors_header")
    counting(adapterdir, "read_adapter_weights")
    return seen


ONCE = {"hash adapter.safetensors": 1, "hash manifest.json": 1, "hash README.md": 1,
        "decode manifest": 1, "validate": 1, "check_attach": 1, "read_safetensors_header": 1,
        "read_adapter_weights": 1}


def predict(*args) -> None:
    result = CliRunner().invoke(cli, ["predict", *map(str, args), "--json"])
    assert result.exit_code == 0, result.output
    assert all("label" in json.loads(line) for line in result.stdout.splitlines())


def test_predict_reads_hashes_and_parses_each_file_once(signed_dir, tiny_base_dir, counts):
    predict(signed_dir, "a gripping film", "--base", tiny_base_dir, "--allow-base-mismatch")
    assert {k: v for k, v in counts.items() if k != "other"} == ONCE


@pytest.fixture
def other_dir(signed_dir, tmp_path) -> Path:
    """A second signed adapter, `other`, by the same trusted key as `signed_dir`."""
    return make_signed_bundle(tmp_path / "other", name="other")


def test_predict_with_several_adapters_verifies_each_once(signed_dir, other_dir, tiny_base_dir,
                                                          counts):
    predict("-a", signed_dir, "-a", other_dir, "a gripping film", "--base", tiny_base_dir,
            "--allow-base-mismatch")
    assert {k: v for k, v in counts.items() if k != "other"} == {k: 2 * v
                                                                   for k, v in ONCE.items()}
