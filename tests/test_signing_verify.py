"""hub sign / hub verify: who signed, and every way a bundle can fail, each with its own
message and a non-zero exit."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from click.testing import CliRunner

from hubcli.cli.main import cli
from hubcli.errors import NoSignatureError, TamperedError, UntrustedSignerError
from hubcli.signing import keys
from hubcli.signing.verify import verify_bundle, verify_signature


def hub(*args: str):
    return CliRunner().invoke(cli, list(args))


def key_id_of(directory) -> str:
    return json.loads((directory / "manifest.json").read_text())["signer"]["key_id"]


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_fails(directory, message: str, hint: str | None = None) -> None:
    result = hub("verify", str(directory))
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == f"error: {message}"
    if hint:
        assert lines[1] == f"hint: {hint}"
    assert result.stdout == ""


def test_sign_records_the_signer_and_verify_names_it(bundle_dir):
    result = hub("keygen", "--name", "alice")
    assert result.exit_code == 0, result.output
    kid = result.stdout.split()[3]
    result = hub("sign", str(bundle_dir))
    assert result.exit_code == 0, result.output
    assert result.stdout == f"signed {bundle_dir} with key {kid}: wrote {bundle_dir}/model.sig\n"
    assert json.loads((bundle_dir / "manifest.json").read_text())["signer"] == {
        "key_id": kid, "name": "alice"}
    result = hub("verify", str(bundle_dir))
    assert result.exit_code == 0, result.output
    assert result.stdout == (f"OK: {bundle_dir} (sst2-adapter 1.0.0) is intact and signed by "
                             f"alice ({kid})\n")
    result = hub("verify", "--json", str(bundle_dir))
    assert json.loads(result.stdout) == {"ok": True, "directory": str(bundle_dir),
                                         "name": "sst2-adapter", "version": "1.0.0",
                                         "key_id": kid, "signer": "alice"}


def test_signature_is_the_openssf_format_over_every_file(signed_dir):
    bundle = json.loads((signed_dir / "model.sig").read_text())
    assert bundle["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    envelope = bundle["dsseEnvelope"]
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://model_signing/signature/v1.0"
    assert {r["name"]: r["digest"] for r in statement["predicate"]["resources"]} == {
        n: sha(signed_dir / n) for n in ("README.md", "adapter.safetensors", "manifest.json")}


def test_sign_needs_a_bundled_folder_and_a_key(tmp_path, bundle_dir):
    result = hub("sign", str(bundle_dir))
    assert result.exit_code == 1
    assert result.stderr.splitlines()[:2] == [
        f"error: no signing key at {keys.private_key_path()}",
        "hint: create one with `hub keygen`"]
    hub("keygen")
    (bundle_dir / "README.md").unlink()
    result = hub("sign", str(bundle_dir))
    assert result.stderr.splitlines()[:2] == [
        f"error: {bundle_dir}: README.md is missing",
        "hint: run `hub bundle DIR` to write the model card"]


def test_changed_byte(signed_dir):
    weights = signed_dir / "adapter.safetensors"
    signed = sha(weights)
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    assert_fails(signed_dir, f"{signed_dir}: adapter.safetensors was modified after signing "
                             f"(sha256 {sha(weights)}, signed {signed})",
                 "get an intact copy again; if you changed it on purpose, run `hub bundle` and "
                 "`hub sign` again")


def test_edited_manifest(signed_dir):
    manifest = json.loads((signed_dir / "manifest.json").read_text())
    manifest["metrics"]["best"]["accuracy"] = 0.99
    (signed_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    assert_fails(signed_dir, f"{signed_dir}: manifest.json was edited after signing")


def test_extra_file(signed_dir):
    (signed_dir / "notes.txt").write_text("hello")
    assert_fails(signed_dir, f"{signed_dir}: notes.txt is not covered by the signature "
                             "(added after signing?)")


def test_missing_file(signed_dir):
    (signed_dir / "README.md").unlink()
    assert_fails(signed_dir, f"{signed_dir}: README.md is missing (it was signed)")


def test_renamed_file(signed_dir):
    (signed_dir / "adapter.safetensors").rename(signed_dir / "weights.safetensors")
    assert_fails(signed_dir, f"{signed_dir}: adapter.safetensors was renamed to "
                             "weights.safetensors after signing")


def test_untrusted_key(signed_dir):
    kid = key_id_of(signed_dir)
    assert hub("trust", "remove", "alice").exit_code == 0
    assert_fails(signed_dir, f"{signed_dir}: signed by a key that is not trusted (manifest.json "
                             f"names signer {kid} (alice))",
                 "if you trust this signer, get their public key and run "
                 "`hub trust add KEY.pub.pem --name NAME`")


def test_no_signature(signed_dir):
    (signed_dir / "model.sig").unlink()
    assert_fails(signed_dir, f"{signed_dir}: not signed (no model.sig)",
                 "sign it with `hub sign DIR` (create a key once with `hub keygen`)")


def test_forged_signature_bytes(signed_dir):
    bundle = json.loads((signed_dir / "model.sig").read_text())
    sig = bytearray(base64.b64decode(bundle["dsseEnvelope"]["signatures"][0]["sig"]))
    sig[-1] ^= 0x01
    bundle["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(sig).decode()
    (signed_dir / "model.sig").write_text(json.dumps(bundle))
    assert_fails(signed_dir, f"{signed_dir}/model.sig: the signature does not verify with key "
                             f"{key_id_of(signed_dir)} (InvalidSignature)")


def test_garbage_signature_file(signed_dir):
    (signed_dir / "model.sig").write_text("not json")
    assert_fails(signed_dir, f"{signed_dir}/model.sig: not a Sigstore bundle (JSONDecodeError)")


def test_manifest_naming_another_signer(signed_dir):
    """Signed with key B while the manifest claims key A: the claim must match the signature."""
    from hubcli.signing import upstream

    hub("keygen", "--force", "--name", "bob")
    (signed_dir / "model.sig").write_text(upstream.sign_directory(
        signed_dir, keys.private_key_path(), None, "model.sig"))
    assert_fails(signed_dir, f"{signed_dir}: manifest.json names signer "
                             f"{key_id_of(signed_dir)}, but the signature was made by "
                             f"{keys.key_id(keys.public_key_path().read_bytes())}")


def test_signature_valid_but_bundle_malformed(signed_dir):
    """A file the signature covers but a bundle may not hold (signed with another tool)."""
    from hubcli.signing import upstream

    (signed_dir / "notes.txt").write_text("x")
    (signed_dir / "model.sig").write_text(upstream.sign_directory(
        signed_dir, keys.private_key_path(), None, "model.sig"))
    assert_fails(signed_dir, f"{signed_dir}/notes.txt: file not allowed in a bundle")


def test_library_api(signed_dir, tmp_path):
    pem = keys.public_key_path().read_bytes()
    assert verify_signature(signed_dir, [pem]) == keys.key_id(pem)
    with pytest.raises(UntrustedSignerError):
        verify_signature(signed_dir, [])
    result = verify_bundle(signed_dir)
    assert (result.key_id, result.signer_name) == (keys.key_id(pem), "alice")
    (signed_dir / "README.md").write_text("x")
    with pytest.raises(TamperedError) as e:
        verify_signature(signed_dir, [pem])
    assert e.value.file == "README.md"
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoSignatureError):
        verify_signature(tmp_path / "empty", [pem])


def test_passphrase_protected_key(bundle_dir, monkeypatch):
    result = CliRunner().invoke(cli, ["keygen", "--encrypt"], input="s3cret\ns3cret\n")
    assert result.exit_code == 0, result.output
    assert keys.private_key_path().read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY")
    result = CliRunner().invoke(cli, ["sign", str(bundle_dir)], input="wrong\n")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == f"error: {keys.private_key_path()}: wrong passphrase"
    result = CliRunner().invoke(cli, ["sign", str(bundle_dir)], input="s3cret\n")
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("HUB_KEY_PASSPHRASE", "s3cret")
    assert hub("sign", str(bundle_dir)).exit_code == 0
    assert hub("verify", str(bundle_dir)).exit_code == 0
