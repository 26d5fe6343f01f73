"""`hub bundle`: check an adapter folder, write its model card and list the card in the manifest."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from hubcli.format import manifest as manifest_io
from hubcli.bundle.card import render_model_card
from hubcli.format.bundle_rules import (README, SIGNATURE, check_listed_files, check_names,
                                 check_weights, hash_files, list_files)
from hubcli.errors import BundleError
from hubcli.fsutil import atomic_write_bytes, sha256_file
from hubcli.format.manifest import MANIFEST, weights_file


def make_bundle(directory: Path) -> dict[str, Any]:
    """Check `directory`, write README.md (the model card) and record it in the manifest's
    "files". Returns the updated manifest. Running it again changes nothing.

    An adapter remembered as self-trained (hubcli.signing.policy) stays so, although its
    manifest changes.

    Raises:
        BundleError: see `check_bundle`; also when the folder is signed already and bundling
            would change it (the signature would no longer verify).
        ManifestError: manifest.json is missing or invalid.
    """
    from hubcli.signing import policy  # policy depends on this package; import late

    directory = Path(directory)
    sizes = list_files(directory)
    check_names(directory, sizes)
    manifest = manifest_io.read(directory)
    # README.md is about to be rewritten, so its current digest is not checked.
    without_card = {**manifest, "files": [f for f in manifest["files"] if f["path"] != README]}
    others = {n: s for n, s in sizes.items() if n != README}
    digests = hash_files(directory, others)
    check_listed_files(directory, without_card, others, digests)
    check_weights(directory, manifest)

    card = render_model_card(without_card).encode("utf-8")
    entry = {"path": README, "sha256": hashlib.sha256(card).hexdigest(), "size": len(card)}
    bundled = {**manifest, "files": [*without_card["files"], entry]}
    readme = directory / README
    if bundled == manifest and readme.exists() and sha256_file(readme) == entry["sha256"]:
        return manifest
    if SIGNATURE in sizes:
        raise BundleError(f"is signed already; bundling would change {README} or {MANIFEST} "
                          f"and invalidate {SIGNATURE}", path=str(directory),
                          hint=f"delete {SIGNATURE}, run `hub bundle` again, then `hub sign`")
    self_trained = policy.is_self_trained(digests[weights_file(manifest)], digests[MANIFEST])
    atomic_write_bytes(readme, card)
    manifest_io.write(directory, bundled)
    if self_trained:
        policy.record_trained(directory)
    return bundled
