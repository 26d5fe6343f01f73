"""Interoperability with the upstream OpenSSF `model_signing` CLI, both ways."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from hubcli.cli.main import cli
from hubcli.signing import keys

MODEL_SIGNING = Path(sys.executable).parent / "model_signing"
pytestmark = pytest.mark.skipif(not MODEL_SIGNING.exists(), reason="model_signing CLI missing")


def upstream(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(MODEL_SIGNING), *args], capture_output=True, text=True,
                          timeout=120)


def test_hub_signature_verifies_with_model_signing(signed_dir):
    result = upstream("verify", "key", str(signed_dir), "--signature",
                      str(signed_dir / "model.sig"), "--public_key", str(keys.public_key_path()))
    assert result.returncode == 0, result.stderr
    assert "Verification succeeded" in result.stdout
    # and upstream sees tampering too, so it really checks our digests
    (signed_dir / "README.md").write_text("changed")
    result = upstream("verify", "key", str(signed_dir), "--signature",
                      str(signed_dir / "model.sig"), "--public_key", str(keys.public_key_path()))
    assert result.returncode == 1
    assert "Hash mismatch for" in result.stderr and "README.md" in result.stderr


def test_model_signing_signature_verifies_with_hub(bundle_dir, tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = tmp_path / "upstream.pem", tmp_path / "upstream.pub.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    result = upstream("sign", "key", str(bundle_dir), "--private_key", str(private),
                      "--signature", str(bundle_dir / "model.sig"))
    assert result.returncode == 0, result.stderr

    runner = CliRunner()
    result = runner.invoke(cli, ["verify", str(bundle_dir)])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {bundle_dir}: signed by a key that is not trusted")
    assert runner.invoke(cli, ["trust", "add", str(public), "--name", "upstream"]).exit_code == 0
    result = runner.invoke(cli, ["verify", str(bundle_dir)])
    assert result.exit_code == 0, result.output
    assert result.stdout == (f"OK: {bundle_dir} (sst2-adapter 1.0.0) is intact and signed by "
                             f"upstream ({keys.key_id(public.read_bytes())})\n")
