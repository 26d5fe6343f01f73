"""The attach verdict cache (signing.verdicts): a bundle verified once attaches again without
model-signing, and any changed byte, or a key no longer trusted, is checked in full again."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hubcli.errors import BundleError, HubError, InvalidSignatureError, TamperedError
from hubcli.settings import VERIFIED_FILE
from hubcli.signing import trust
from hubcli.signing.policy import check_attach


def test_second_attach_does_not_import_model_signing(signed_dir, hub_home):
    code = ("import sys; from pathlib import Path; from hubcli.signing.policy import check_attach; "
            f"v = check_attach(Path({str(signed_dir)!r})); "
            "print(v.status, 'model_signing' in sys.modules)")
    run = lambda: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True).stdout.split()
    assert run() == ["trusted", "True"]   # first time: full check, then remembered
    assert (hub_home / VERIFIED_FILE).is_file()
    assert run() == ["trusted", "False"]  # same bytes: the remembered verdict


@pytest.mark.parametrize("name", ["adapter.safetensors", "manifest.json", "README.md",
                                  "model.sig"])
def test_any_changed_byte_after_a_cached_verdict_is_refused(signed_dir, name):
    assert check_attach(signed_dir).status == "trusted"
    path = signed_dir / name
    data = bytearray(path.read_bytes())
    for offset in (0, len(data) // 2, len(data) - 2):
        changed = bytearray(data)
        changed[offset] ^= 0x01
        path.write_bytes(bytes(changed))
        with pytest.raises(HubError):
            check_attach(signed_dir, allow_unsigned=True)
    path.write_bytes(bytes(data))
    assert check_attach(signed_dir).status == "trusted"


def test_modified_weights_are_named_as_tampered_after_a_cached_verdict(signed_dir):
    check_attach(signed_dir)
    path = signed_dir / "adapter.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises((TamperedError, BundleError, InvalidSignatureError)) as e:
        check_attach(signed_dir)
    assert "adapter.safetensors" in str(e.value)


def test_a_key_no_longer_trusted_is_refused_despite_a_cached_verdict(signed_dir):
    check_attach(signed_dir)
    trust.remove("alice")
    with pytest.raises(HubError, match="not trusted"):
        check_attach(signed_dir)


def test_damaged_cache_is_rebuilt(signed_dir, hub_home):
    (hub_home / VERIFIED_FILE).write_text("{not json")
    assert check_attach(signed_dir).status == "trusted"
    assert len(json.loads((hub_home / VERIFIED_FILE).read_text())) == 1
