"""The attach policy: trusted, self-trained, or explicitly allowed; everything else refused
before any weight is loaded. Also: the signing code stays torch-free."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from factories import make_adapter_dir

from hubcli.bundle import make_bundle
from hubcli.errors import (BundleError, InvalidSignatureError, NoSignatureError, TamperedError,
                           UntrustedSignerError)
from hubcli.signing import keys, trust
from hubcli.signing.policy import check_attach, record_trained


def test_trusted(signed_dir):
    verdict = check_attach(signed_dir)
    kid = keys.key_id(keys.public_key_path().read_bytes())
    assert (verdict.status, verdict.key_id, verdict.signer_name) == ("trusted", kid, "alice")
    assert verdict.message == f"verified: {signed_dir} is signed by alice ({kid})"


def test_unsigned_is_refused_unless_allowed(bundle_dir):
    with pytest.raises(NoSignatureError) as e:
        check_attach(bundle_dir)
    assert str(e.value) == f"{bundle_dir}: not signed (no model.sig)"
    assert e.value.hint.endswith("; or pass --allow-unsigned to use it anyway")
    verdict = check_attach(bundle_dir, allow_unsigned=True)
    assert (verdict.status, verdict.key_id) == ("unsigned-allowed", None)
    assert verdict.message == (f"warning: {bundle_dir} is not signed; attaching it anyway "
                               "because of --allow-unsigned")


def test_self_trained_folder_is_allowed_with_a_notice(tmp_path):
    d = make_adapter_dir(tmp_path / "mine")
    record_trained(d)
    verdict = check_attach(d)
    assert verdict.status == "self-trained"
    assert verdict.message == (f"notice: {d} is not signed; using it because you made it on "
                               "this machine: hub train, fuse or import (sign it with `hub sign` "
                               "before sharing it)")
    make_bundle(d)  # changes the manifest, and keeps the folder recognised
    assert check_attach(d).status == "self-trained"


def test_self_trained_record_is_by_content(tmp_path):
    d = make_adapter_dir(tmp_path / "mine")
    record_trained(d)
    other = make_adapter_dir(tmp_path / "other", seed=1)
    with pytest.raises(NoSignatureError):
        check_attach(other)
    weights = d / "adapter.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(NoSignatureError):  # no longer what was trained
        check_attach(d)
    with pytest.raises(BundleError, match="adapter.safetensors: sha256 is"):
        check_attach(d, allow_unsigned=True)  # digests are checked even when allowed


def test_untrusted_is_refused_unless_allowed(signed_dir):
    trust.remove("alice")
    with pytest.raises(UntrustedSignerError):
        check_attach(signed_dir)
    verdict = check_attach(signed_dir, allow_unsigned=True)
    assert verdict.status == "unsigned-allowed"
    assert verdict.message == (f"warning: {signed_dir} is signed by a key that is not trusted; "
                               "attaching it anyway because of --allow-unsigned")


def test_registry_keys_are_accepted_as_extra_keys(signed_dir):
    pem = keys.public_key_path().read_bytes()
    trust.remove("alice")
    verdict = check_attach(signed_dir, extra_public_keys=[pem])
    assert (verdict.status, verdict.key_id, verdict.signer_name) == (
        "trusted", keys.key_id(pem), "alice")  # name from the verified manifest
    stranger = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(UntrustedSignerError):
        check_attach(signed_dir, extra_public_keys=[stranger])


def test_tampering_is_refused_even_when_unsigned_is_allowed(signed_dir):
    (signed_dir / "README.md").write_text("x")
    with pytest.raises(TamperedError):
        check_attach(signed_dir, allow_unsigned=True)
    (signed_dir / "model.sig").write_text("{}")
    with pytest.raises(InvalidSignatureError):
        check_attach(signed_dir, allow_unsigned=True)


def test_trained_records_replace_per_folder(tmp_path, hub_home):
    d = make_adapter_dir(tmp_path / "mine")
    record_trained(d)
    record_trained(d)
    records = json.loads((hub_home / "trained.json").read_text())["adapters"]
    assert len(records) == 1 and records[0]["path"] == str(d.resolve())
    (hub_home / "trained.json").write_text("garbage")
    with pytest.raises(NoSignatureError):  # a damaged record fails safe
        check_attach(d)


def test_signing_and_verifying_never_import_torch():
    code = ("import sys, hubcli.bundle, hubcli.signing.policy, hubcli.signing.sign, "
            "hubcli.signing.verify, hubcli.signing.upstream, hubcli.cli.signing_cmds; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
