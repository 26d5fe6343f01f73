"""hub keygen and hub trust: key files, key ids, the trust store."""

from __future__ import annotations

import hashlib
import json
import stat

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from hubcli.cli.main import cli
from hubcli.errors import SigningKeyError
from hubcli.signing import keys, trust


def hub(*args: str, **kwargs):
    return CliRunner().invoke(cli, list(args), **kwargs)


def pem_of(key) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def test_keygen_writes_an_owner_only_p256_key_and_trusts_it(hub_home):
    result = hub("keygen", "--name", "alice")
    assert result.exit_code == 0, result.output
    private, public = keys.private_key_path(), keys.public_key_path()
    assert private.parent == hub_home / "keys"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(private.parent.stat().st_mode) == 0o700
    key = keys.load_private_key()
    assert key.curve.name == "secp256r1"
    der = key.public_key().public_bytes(serialization.Encoding.DER,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    kid = "sha256:" + hashlib.sha256(der).hexdigest()
    assert keys.key_id(public.read_bytes()) == kid
    assert result.stdout.splitlines()[0] == f"created signing key {kid}"
    assert [(k.name, k.key_id) for k in trust.load()] == [("alice", kid)]
    assert not list(private.parent.glob(".*.tmp"))


def test_keygen_refuses_to_overwrite_unless_forced():
    hub("keygen")
    first = keys.public_key_path().read_bytes()
    result = hub("keygen")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == \
        f"error: a signing key exists already at {keys.private_key_path()}"
    assert hub("keygen", "--force").exit_code == 0
    assert keys.public_key_path().read_bytes() != first
    # the new key replaced the old one under the same trust-store name
    assert [k.name for k in trust.load()] == ["self"]


def test_private_key_errors(monkeypatch, tmp_path):
    monkeypatch.setenv("HUB_KEY_PASSPHRASE", "pw")
    hub("keygen")
    with pytest.raises(SigningKeyError, match="the key is encrypted and no passphrase was given"):
        keys.load_private_key()
    with pytest.raises(SigningKeyError, match="wrong passphrase"):
        keys.load_private_key(passphrase="nope")
    assert keys.load_private_key(passphrase="pw").curve.name == "secp256r1"
    plain = tmp_path / "plain.pem"
    plain.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    with pytest.raises(SigningKeyError, match="a passphrase was given but the key is not"):
        keys.load_private_key(plain, "pw")
    plain.write_text("junk")
    with pytest.raises(SigningKeyError, match="not a PEM private key"):
        keys.load_private_key(plain)


def test_trust_add_list_remove(tmp_path):
    alice, bob = tmp_path / "alice.pub.pem", tmp_path / "bob.pub.pem"
    alice.write_bytes(pem_of(ec.generate_private_key(ec.SECP256R1())))
    bob.write_bytes(pem_of(ec.generate_private_key(ec.SECP384R1())))
    a_id, b_id = keys.key_id(alice.read_bytes()), keys.key_id(bob.read_bytes())

    assert hub("trust", "list").stdout == \
        "no trusted keys; add one with `hub trust add KEY.pub.pem --name NAME`\n"
    assert hub("trust", "add", str(alice), "--name", "alice").stdout == f"trusted alice ({a_id})\n"
    assert hub("trust", "add", str(bob)).stdout == f"trusted {b_id}\n"
    listed = json.loads(hub("trust", "list", "--json").stdout)
    assert [(k["name"], k["key_id"]) for k in listed] == [("alice", a_id), (None, b_id)]
    table = hub("trust", "list").stdout.splitlines()
    assert table[0].split() == ["name", "key", "id", "added"]
    assert table[2].split()[:2] == ["alice", a_id]

    assert hub("trust", "remove", b_id.removeprefix("sha256:")[:10]).stdout == \
        f"no longer trusted: {b_id}\n"
    assert hub("trust", "remove", "alice").exit_code == 0
    result = hub("trust", "remove", "alice")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == "error: no trusted key is named or has the id 'alice'"


def test_trust_add_conflicts_and_bad_keys(tmp_path):
    one, two = tmp_path / "1.pem", tmp_path / "2.pem"
    one.write_bytes(pem_of(ec.generate_private_key(ec.SECP256R1())))
    two.write_bytes(pem_of(ec.generate_private_key(ec.SECP256R1())))
    hub("trust", "add", str(one), "--name", "alice")
    assert hub("trust", "add", str(one), "--name", "alice").exit_code == 0  # idempotent
    result = hub("trust", "add", str(two), "--name", "alice")
    assert result.stderr.splitlines()[0] == \
        f"error: the name 'alice' is used by key {keys.key_id(one.read_bytes())}"
    result = hub("trust", "add", str(one), "--name", "carol")
    assert result.stderr.splitlines()[0] == \
        f"error: key {keys.key_id(one.read_bytes())} is trusted already as 'alice'"
    result = hub("trust", "add", str(two), "--name", "bad name")
    assert result.stderr.splitlines()[0] == "error: key name 'bad name' is not allowed"

    rsa_pem = tmp_path / "rsa.pem"
    rsa_pem.write_bytes(pem_of(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    assert hub("trust", "add", str(rsa_pem)).stderr.splitlines()[0] == \
        "error: public key: not an elliptic-curve key"
    junk = tmp_path / "junk.pem"
    junk.write_text("hello")
    assert hub("trust", "add", str(junk)).stderr.splitlines()[0] == \
        "error: public key: not a PEM public key"
    assert len(trust.load()) == 1


def test_damaged_trust_store_is_reported(hub_home):
    (hub_home / "trusted_keys.json").write_text("{")
    result = hub("trust", "list")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {hub_home / 'trusted_keys.json'}: the trust store "
                                    "is damaged")
