"""Base models on our registry: publish a base folder (`hub push --base DIR`), and fetch the
base an adapter was trained on by the content hash its manifest records (`hub pull`, when the
base is not on this machine). The registry checks and hashes a base with the same code
(`hubcli.format.base_identity`); the download is hashed again here before it is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable
from urllib.parse import quote

from hubcli.errors import ModelError, NotFoundError
from hubcli.format.base_identity import (BASE_FILES, WEIGHTS_SUFFIX, check_base_names,
                                         check_shard_index)
from hubcli.format.bundle_rules import list_files
from hubcli.remote.client import (MAIN, REGISTRY, PushResult, Remote, client,
                                  download_snapshot, native, purge_snapshot, whoami)
from hubcli.remote.errors import translated
from hubcli.settings import HF_CACHE_DIR, home_path

BASE_PATTERNS = (f"*{WEIGHTS_SUFFIX}", *BASE_FILES)


def push_base(remote: Remote, directory: Path, *, repo_id: str | None = None,
              private: bool = False,
              notify: Callable[[str], None] = lambda _m: None) -> PushResult:
    """Publish the base model folder `directory` (safetensors weights, config.json, tokenizer
    files, model card) as one commit; our registry numbers the version. Pushing the same
    files again changes nothing.

    `repo_id` defaults to <the token's user>/<the folder's name>.

    Raises:
        BundleError: a file a base may not hold (pickles, code, anything else), no config.json
            or weights, a shard index naming missing shards.
        AuthError, NotFoundError, RegistryError: the remote refused or cannot be reached.
    """
    from huggingface_hub import CommitOperationAdd

    directory = Path(directory)
    sizes = list_files(directory)
    check_base_names(sizes)
    check_shard_index(directory, sizes)
    repo_id = repo_id or f"{whoami(remote)['name']}/{directory.resolve().name}"
    with client(remote) as api, translated(remote, repo_id=repo_id):
        url = str(api.create_repo(repo_id, private=private or None, exist_ok=True))
        before = _tags(api, repo_id)
        notify(f"uploading {len(sizes)} files ({sum(sizes.values()):,} bytes) to {repo_id} on "
               f"{remote.endpoint}")
        info = api.create_commit(
            repo_id, [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(directory / name))
                      for name in sorted(sizes)],
            commit_message=f"base model {directory.resolve().name}", revision=MAIN)
        after = _tags(api, repo_id) if remote.kind == REGISTRY else {}
    version = next((tag for tag, commit in after.items() if commit == info.oid), MAIN)
    return PushResult(repo_id, version, info.oid, url, info.oid not in before.values(), sizes)


def _tags(api, repo_id: str) -> dict[str, str]:
    """tag name -> commit of `repo_id` (none for a repository without versions)."""
    return {tag.name: tag.target_commit for tag in api.list_repo_refs(repo_id).tags}


def fetch_base(remote: Remote, content_hash: str, tokenizer_hash: str | None = None,
               notify: Callable[[str], None] = lambda _m: None) -> tuple[str, Path] | None:
    """Find the base with `content_hash` on our registry, download it and check its content
    hash (and tokenizer hash, when both sides know one); returns (repo id, local folder), or
    None when the registry hosts no such base (or is the Hugging Face Hub, which cannot be
    asked by hash).

    Raises:
        ModelError: the download's hashes are not the ones asked for (it is removed again).
        AuthError, RegistryError: the registry refused or cannot be reached.
    """
    from hubcli.base.hashing import content_hash as hash_folder

    if remote.kind != REGISTRY:
        return None
    try:
        hosted = native(remote, "GET", f"bases/{quote(content_hash, safe=':')}")
    except NotFoundError:
        return None
    repo_id = hosted["id"]
    notify(f"downloading base {repo_id}@{hosted['version']} ({content_hash[:19]}…) from "
           f"{remote.endpoint}")
    snapshot = download_snapshot(remote, repo_id, hosted["commit"],
                                 home_path(HF_CACHE_DIR) / remote.cache_key,
                                 patterns=BASE_PATTERNS)
    got = hash_folder(snapshot)
    wrong = got != content_hash or (tokenizer_hash and hosted.get("tokenizer_hash")
                                    and hosted["tokenizer_hash"] != tokenizer_hash)
    if wrong:
        purge_snapshot(snapshot)
        raise ModelError(f"base {repo_id}@{hosted['version']} from {remote.endpoint} does not "
                         f"match the adapter's base: content hash {got}, tokenizer hash "
                         f"{hosted.get('tokenizer_hash')}; wanted {content_hash}, "
                         f"{tokenizer_hash}", hint="tell the registry's operator; pass "
                         "--base FOLDER with a copy of the right base meanwhile")
    return repo_id, snapshot
