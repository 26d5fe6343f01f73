"""Is a directory a publishable bundle? Allowed files only, manifest valid, digests and sizes
as recorded, weights header matching the architecture.

Torch-free: the registry server runs `check_bundle` on every upload. The steps are public so
that verification can hash each file once and reuse the digests (see hubcli.signing.verify).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection
from pathlib import Path
from typing import Any

from hubcli.format import manifest as manifest_io
from hubcli.format.safetensors_header import check_tensors, read_safetensors_header
from hubcli.format.spec import expected_tensors
from hubcli.errors import BundleError, ManifestError
from hubcli.fsutil import sha256_file
from hubcli.format.manifest import MANIFEST, WEIGHTS_FILES, weights_file

README = "README.md"
SIGNATURE = "model.sig"
# One weights file: adapter.safetensors, or fusion.safetensors for an AdapterFusion.
ALLOWED_FILES = (MANIFEST, *WEIGHTS_FILES, README, SIGNATURE)
# Files the manifest's "files" list must describe: all but the manifest itself and the
# signature, which is written after (and over) the manifest.
LISTED_FILES = (*WEIGHTS_FILES, README)
# Formats that run code when loaded: named explicitly so the refusal says why.
PICKLE_SUFFIXES = (".pkl", ".pickle", ".pt", ".pth", ".bin", ".ckpt", ".joblib", ".npy", ".npz")


def list_files(directory: Path) -> dict[str, int]:
    """File name -> size of every entry in `directory`, which must hold only regular files.

    Symlinks are refused without following them, so nothing outside the bundle is ever read.

    Raises:
        BundleError: not a directory, or it holds a symlink, sub-folder or special file.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise BundleError("not a directory", path=str(directory),
                          hint="point at an adapter folder written by `hub train --out`")
    sizes: dict[str, int] = {}
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        path = str(directory / entry.name)
        if entry.is_symlink():
            raise BundleError("symlinks are not allowed in a bundle", path=path,
                              hint="replace the link with a copy of the file")
        st = entry.stat(follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            raise BundleError("sub-folders are not allowed in a bundle", path=path,
                              hint=f"a bundle holds only {', '.join(ALLOWED_FILES)}")
        if not stat.S_ISREG(st.st_mode):
            raise BundleError("not a regular file", path=path)
        sizes[entry.name] = st.st_size
    return sizes


def check_names(directory: Path, names: Collection[str], *,
                require_readme: bool = False, require_signature: bool = False) -> None:
    """Only allowed file names, and the required ones present.

    Raises:
        BundleError: naming the first file that is not allowed, or the missing one.
    """
    allowed = ", ".join(ALLOWED_FILES)
    for name in sorted(names):
        if name in ALLOWED_FILES:
            continue
        path = str(Path(directory) / name)
        if name.lower().endswith(PICKLE_SUFFIXES):
            raise BundleError("pickle-based files are not allowed in a bundle (loading them "
                              "can run code)", path=path, hint=f"a bundle holds only {allowed}")
        raise BundleError("file not allowed in a bundle", path=path,
                          hint=f"a bundle holds only {allowed}; remove the file")
    weights = [n for n in WEIGHTS_FILES if n in names]
    if len(weights) > 1:
        raise BundleError(f"holds both {' and '.join(weights)}; a bundle has one weights file",
                          path=str(directory), hint="remove the one its manifest does not use")
    required = [MANIFEST, *(weights or WEIGHTS_FILES[:1])]
    if require_readme:
        required.append(README)
    if require_signature:
        required.append(SIGNATURE)
    for name in required:
        if name not in names:
            raise BundleError(f"{name} is missing", path=str(directory), hint=_missing_hint(name))


def _missing_hint(name: str) -> str:
    if name == README:
        return "run `hub bundle DIR` to write the model card"
    if name == SIGNATURE:
        return "run `hub sign DIR` to sign the bundle"
    return "point at an adapter folder written by `hub train --out`"


def hash_files(directory: Path, names: Collection[str]) -> dict[str, str]:
    """File name -> hex SHA-256, the signature excluded (it is not part of what is signed)."""
    return {n: sha256_file(Path(directory) / n) for n in sorted(names) if n != SIGNATURE}


def check_listed_files(directory: Path, manifest: dict[str, Any], sizes: dict[str, int],
                       digests: dict[str, str]) -> None:
    """The manifest's "files" list describes exactly the bundle's files, sizes and digests.

    Raises:
        BundleError: a duplicate, unknown, missing, unlisted or changed file.
    """
    where = str(Path(directory) / MANIFEST)
    listed: dict[str, dict[str, Any]] = {}
    for entry in manifest["files"]:
        name = entry["path"]
        if name in listed:
            raise BundleError(f"lists {name} twice", path=where)
        if name not in LISTED_FILES:
            raise BundleError(f"lists {name}, which is not a bundle file "
                              f"({', '.join(LISTED_FILES)})", path=where)
        if name not in sizes:
            raise BundleError(f"lists {name}, but the file is missing", path=where)
        listed[name] = entry
    for name in LISTED_FILES:
        if name in sizes and name not in listed:
            raise BundleError(f"{name} is not listed in {MANIFEST} \"files\"", path=where,
                              hint="run `hub bundle DIR` to update the manifest")
    for name, entry in sorted(listed.items()):
        path = str(Path(directory) / name)
        if sizes[name] != entry["size"]:
            raise BundleError(f"size is {sizes[name]} bytes, but {MANIFEST} says {entry['size']}",
                              path=path, hint="the file changed after the manifest was written")
        if digests[name] != entry["sha256"]:
            raise BundleError(f"sha256 is {digests[name]}, but {MANIFEST} says "
                              f"{entry['sha256']}", path=path,
                              hint="the file changed after the manifest was written")


def check_weights(directory: Path, manifest: dict[str, Any]) -> None:
    """The safetensors header holds exactly the tensors the architecture implies.

    Raises:
        BundleError: malformed header, or a missing/extra/mistyped/misshaped tensor.
        ManifestError: the manifest's architecture cannot be turned into a tensor layout.
    """
    try:
        expected = expected_tensors(manifest)
    except (KeyError, ValueError) as e:
        raise ManifestError(f"cannot derive the tensor layout: {e}",
                            path=str(Path(directory) / MANIFEST)) from None
    path = Path(directory) / weights_file(manifest)
    if not path.is_file():
        kind = manifest["architecture"].get("type", "houlsby")
        raise BundleError(f"missing: an adapter of architecture {kind} keeps its weights in "
                          f"{path.name}", path=str(path),
                          hint="the manifest and the weights file do not belong together")
    check_tensors(read_safetensors_header(path), expected, path)


def check_contents(directory: Path, sizes: dict[str, int],
                   digests: dict[str, str]) -> dict[str, Any]:
    """Manifest, listed files and weights header, given the already listed and hashed files.

    Raises:
        ManifestError, BundleError: see `check_bundle`.
    """
    manifest = manifest_io.read(directory)
    check_listed_files(directory, manifest, sizes, digests)
    check_weights(directory, manifest)
    return manifest


def check_bundle(directory: Path, *, require_readme: bool = False,
                 require_signature: bool = False) -> dict[str, Any]:
    """Check that `directory` is a well-formed bundle and return its validated manifest.

    Names are checked before anything is hashed, so a stray large file is refused cheaply.

    Raises:
        BundleError: a file that is not allowed, missing, changed, or a bad weights header.
        ManifestError: manifest.json is missing, invalid, or inconsistent with the weights.
    """
    directory = Path(directory)
    sizes = list_files(directory)
    check_names(directory, sizes, require_readme=require_readme,
                require_signature=require_signature)
    return check_contents(directory, sizes, hash_files(directory, sizes))
