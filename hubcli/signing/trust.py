"""The trust store: public keys whose signatures `hub verify` and attaching accept, each with an
optional name. Kept in `$HUB_HOME/trusted_keys.json`, rewritten atomically."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from hubcli.errors import SigningKeyError, UsageError
from hubcli.fsutil import atomic_write_text
from hubcli.settings import TRUST_FILE, home_path
from hubcli.signing.keys import key_id

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
MIN_ID_PREFIX = 8


@dataclass(frozen=True)
class TrustedKey:
    key_id: str
    name: str | None
    public_key: str  # PEM text
    added: str

    @property
    def label(self) -> str:
        return signer_label(self.name, self.key_id)


def signer_label(name: str | None, key_id: str) -> str:
    """'alice (sha256:…)', or the bare key id."""
    return f"{name} ({key_id})" if name else key_id


def trust_path() -> Path:
    return home_path(TRUST_FILE)


def load() -> list[TrustedKey]:
    """All trusted keys, in the order they were added (none if the store does not exist).

    Raises:
        SigningKeyError: the store is not readable JSON of the expected shape.
    """
    path = trust_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [TrustedKey(**k) for k in data["keys"]]
    except FileNotFoundError:
        return []
    except (ValueError, KeyError, TypeError) as e:
        raise SigningKeyError(f"{path}: the trust store is damaged ({e})",
                              hint="fix or delete the file, then `hub trust add` again") from None


def _save(keys: list[TrustedKey]) -> None:
    data = {"version": 1, "keys": [asdict(k) for k in keys]}
    atomic_write_text(trust_path(), json.dumps(data, indent=2) + "\n")


def add(public_key_pem: bytes, name: str | None = None, *,
        replace_name: bool = False) -> TrustedKey:
    """Trust a public key. Adding a key that is trusted already under the same (or no) name
    returns the existing entry. With `replace_name`, a different key holding `name` is dropped.

    Raises:
        SigningKeyError: not a supported public key; trusted already under another name; the
            name belongs to another key.
        UsageError: the name is not a simple token.
    """
    if name is not None and not NAME.match(name):
        raise UsageError(f"key name {name!r} is not allowed",
                         hint="use letters, digits, '.', '_', '@' or '-' (at most 64)")
    kid = key_id(public_key_pem)
    keys = load()
    for k in keys:
        if k.key_id == kid:
            if name is None or k.name == name:
                return k
            raise SigningKeyError(f"key {kid} is trusted already as {k.name!r}",
                                  hint=f"`hub trust remove {kid}` first to rename it")
    clash = [k for k in keys if name is not None and k.name == name]
    if clash and not replace_name:
        raise SigningKeyError(f"the name {name!r} is used by key {clash[0].key_id}",
                              hint=f"choose another --name, or `hub trust remove {name}` first")
    entry = TrustedKey(kid, name, public_key_pem.decode("ascii"),
                       datetime.now(timezone.utc).isoformat(timespec="seconds"))
    _save([k for k in keys if k not in clash] + [entry])
    return entry


def _matches(k: TrustedKey, ref: str) -> bool:
    if ref == k.name or ref == k.key_id:
        return True
    hex_ref = ref.removeprefix("sha256:")
    return len(hex_ref) >= MIN_ID_PREFIX and k.key_id.removeprefix("sha256:").startswith(hex_ref)


def remove(ref: str) -> TrustedKey:
    """Stop trusting the key named `ref`, or with key id (or unique id prefix) `ref`.

    Raises:
        SigningKeyError: no such key, or the prefix matches several.
    """
    keys = load()
    hits = [k for k in keys if _matches(k, ref)]
    if not hits:
        raise SigningKeyError(f"no trusted key is named or has the id {ref!r}",
                              hint="see `hub trust list`")
    if len(hits) > 1:
        raise SigningKeyError(f"{ref!r} matches {len(hits)} trusted keys",
                              hint="give the full key id")
    _save([k for k in keys if k != hits[0]])
    return hits[0]


def unnamed(public_key_pems: Iterable[bytes]) -> list[TrustedKey]:
    """Keys the caller accepts without the trust store (e.g. a registry's keys for a namespace).

    Raises:
        SigningKeyError: a key is not a supported PEM public key.
    """
    return [TrustedKey(key_id(pem), None, pem.decode("ascii"), "") for pem in public_key_pems]


def accepted_keys(extra_public_keys: Iterable[bytes] = ()) -> list[TrustedKey]:
    """The trust store's keys plus `extra_public_keys` (PEM).

    Raises:
        SigningKeyError: the store is damaged or an extra key is not a supported public key.
    """
    return load() + unnamed(extra_public_keys)
