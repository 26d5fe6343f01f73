"""The one network seam: every call to a registry goes through here, made with huggingface_hub
for both targets, our registry and the Hugging Face Hub, parameterised by a `Remote`
(endpoint + token). Tests point a `Remote` at a registry they start on localhost.

Our registry is spoken to with Xet off and Git LFS opted in (it does not speak Xet; see
docs/hf-hub-protocol.md), and regardless of HF_HUB_OFFLINE, which is about huggingface.co.
What the Hub protocol lacks (search, signing keys, yanked versions) comes from the registry's
native JSON API under /api/v1.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal
from urllib.parse import quote, urlsplit

from hubcli.bundle import ALLOWED_FILES, SIGNATURE, check_bundle
from hubcli.format.bundle_rules import list_files
from hubcli.errors import ConflictError, NoSignatureError, UsageError
from hubcli.fsutil import git_blob_oid, sha256_file
from hubcli.remote.errors import login_hint, translated

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec

REGISTRY, HF = "registry", "hf"
MAIN = "main"
# Asks our registry for Git LFS uploads of large files instead of inline base64.
LFS_OPT_IN = {"X-Hub-Lfs": "1"}


@dataclass(frozen=True)
class Remote:
    """Where to publish to or pull from, and as whom.

    kind: "registry" (ours: native API available) or "hf" (the Hugging Face Hub).
    progress: show huggingface_hub's transfer progress bars.
    """

    endpoint: str
    token: str | None = field(default=None, repr=False)  # kept out of logs and tracebacks
    kind: Literal["registry", "hf"] = REGISTRY
    progress: bool = True

    @property
    def cache_key(self) -> str:
        """A folder name for this remote's downloads: 'huggingface.co', '127.0.0.1-8000'."""
        parts = urlsplit(self.endpoint)
        return (parts.netloc or parts.path).replace(":", "-").replace("/", "_")


@dataclass(frozen=True)
class PushResult:
    repo_id: str
    version: str
    commit: str
    url: str
    created: bool  # False: this version was published before with the same content
    files: dict[str, int] = field(default_factory=dict)  # name -> size


@dataclass(frozen=True)
class SearchFilters:
    text: str = ""
    task: str | None = None
    head_type: str | None = None
    base_model: str | None = None  # exact base name
    base_hash: str | None = None  # "sha256:..." content hash of the base
    tags: tuple[str, ...] = ()
    namespace: str | None = None
    sort: str = "downloads"
    limit: int = 20


@contextmanager
def _patched(obj: Any, attr: str, value: Any) -> Iterator[None]:
    old = getattr(obj, attr)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        setattr(obj, attr, old)


@contextmanager
def client(remote: Remote):
    """An HfApi for `remote`, with huggingface_hub's module settings adjusted while it is used
    (process-wide: not for concurrent use with other remotes)."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.utils import (are_progress_bars_disabled, disable_progress_bars,
                                       enable_progress_bars)

    with ExitStack() as stack:
        if remote.kind == REGISTRY:
            stack.enter_context(_patched(constants, "HF_HUB_DISABLE_XET", True))
            stack.enter_context(_patched(constants, "HF_HUB_OFFLINE", False))
        if not remote.progress and not are_progress_bars_disabled():
            disable_progress_bars()
            stack.callback(enable_progress_bars)
        # token=False: never send the user's Hugging Face token to another host.
        yield HfApi(endpoint=remote.endpoint, token=remote.token or False,
                    headers=LFS_OPT_IN if remote.kind == REGISTRY else None)


# --- identity ----------------------------------------------------------------------------

def whoami(remote: Remote) -> dict[str, Any]:
    """Who the token belongs to: {"name", "orgs": [...], "auth": {...}, ...}.

    Raises:
        AuthError: no token, or the registry refused it. RegistryError: unreachable.
    """
    from hubcli.errors import AuthError

    if not remote.token:
        raise AuthError(f"not logged in to {remote.endpoint}", hint=login_hint(remote))
    with client(remote) as api, translated(remote):
        return api.whoami()


# --- push --------------------------------------------------------------------------------

def check_signed_bundle(directory: Path) -> dict[str, Any]:
    """The manifest of a complete, signed bundle in `directory`.

    Raises:
        NoSignatureError: not signed. BundleError, ManifestError: not a folder, or not a
            well-formed bundle.
    """
    directory = Path(directory)
    # listed first, so a missing folder is named as such rather than as "not signed"
    if SIGNATURE not in list_files(directory):
        raise NoSignatureError(f"{directory}: not signed (no {SIGNATURE}); unsigned bundles "
                               "are not published",
                               hint=f"run `hub bundle {directory}` then `hub sign {directory}`")
    return check_bundle(directory, require_readme=True, require_signature=True)


def push_bundle(remote: Remote, directory: Path, *, repo_id: str | None = None,
                private: bool = False,
                notify: Callable[[str], None] = lambda _m: None) -> PushResult:
    """Publish the signed bundle in `directory` as one commit on `main` whose message is its
    version, and make sure the version is a tag (our registry tags it itself). Pushing a
    version that exists with the same files changes nothing.

    `repo_id` defaults to <the token's user>/<manifest name>.

    Raises:
        NoSignatureError, BundleError, ManifestError: not a complete signed bundle.
        ConflictError: the version exists with other content.
        AuthError, NotFoundError, RegistryError: the remote refused or cannot be reached.
    """
    directory = Path(directory)
    manifest = check_signed_bundle(directory)
    version = manifest["version"]
    sizes = list_files(directory)
    repo_id = repo_id or f"{whoami(remote)['name']}/{manifest['name']}"
    with client(remote) as api:
        with translated(remote, repo_id=repo_id, revision=version):
            # private=None: the Hub's default visibility (an organisation may set one)
            url = str(api.create_repo(repo_id, private=private or None, exist_ok=True))
            tagged = _tag_target(api, repo_id, version)
            if tagged is not None:
                _require_same_files(api, repo_id, version, directory, sizes)
                return PushResult(repo_id, version, tagged, url, False, sizes)
            notify(f"uploading {len(sizes)} files ({sum(sizes.values()):,} bytes) to "
                   f"{repo_id} on {remote.endpoint}")
            info = api.create_commit(repo_id, _operations(directory, sizes),
                                     commit_message=version, revision=MAIN,
                                     commit_description=manifest.get("description", ""))
            if _tag_target(api, repo_id, version) is None:
                api.create_tag(repo_id, tag=version, revision=info.oid)
    return PushResult(repo_id, version, info.oid, url, True, sizes)


def _operations(directory: Path, sizes: dict[str, int]) -> list:
    from huggingface_hub import CommitOperationAdd

    return [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(directory / name))
            for name in sorted(sizes)]


def _tag_target(api, repo_id: str, version: str) -> str | None:
    """The commit the tag `version` points at, or None."""
    for tag in api.list_repo_refs(repo_id).tags:
        if tag.name == version:
            return tag.target_commit
    return None


def _require_same_files(api, repo_id: str, version: str, directory: Path,
                        sizes: dict[str, int]) -> None:
    """Raises: ConflictError: the published version's bundle files differ from ours."""
    remote = {f.path: f for f in api.list_repo_tree(repo_id, revision=version, recursive=True)
              if f.path in ALLOWED_FILES}
    differ = sorted(set(remote) ^ set(sizes))
    for name in sorted(set(remote) & set(sizes)):
        f, local = remote[name], directory / name
        same = (f.lfs.sha256 == sha256_file(local) if f.lfs is not None
                else f.blob_id == git_blob_oid(local))
        if not same:
            differ.append(name)
    if differ:
        raise ConflictError(f"{repo_id} version {version} is published already with other "
                            f"content ({', '.join(differ)} differ); versions are immutable",
                            repo_id=repo_id, revision=version, status=409,
                            hint="bump the version in manifest.json, then `hub bundle`, "
                                 "`hub sign` and push again")


# --- pull --------------------------------------------------------------------------------

def download_snapshot(remote: Remote, repo_id: str, revision: str, cache_dir: Path, *,
                      patterns: Iterable[str] = ALLOWED_FILES) -> Path:
    """Download the files of `repo_id` at `revision` that match `patterns` (default: the
    bundle's) into the Hugging Face cache layout under `cache_dir`; returns the snapshot
    folder (its files are links into blobs/).

    Raises:
        NotFoundError: no such repository or revision. AuthError, RegistryError.
    """
    with client(remote) as api, translated(remote, repo_id=repo_id, revision=revision):
        return Path(api.snapshot_download(repo_id, revision=revision, cache_dir=str(cache_dir),
                                          allow_patterns=list(patterns)))


def purge_snapshot(snapshot: Path) -> None:
    """Remove a snapshot folder and the cached blobs its files link to."""
    for entry in snapshot.iterdir():
        if entry.is_symlink():
            entry.resolve().unlink(missing_ok=True)
        entry.unlink()
    snapshot.rmdir()


# --- native API (our registry only) --------------------------------------------------------

def native(remote: Remote, method: str, path: str, *, json: Any = None,
           params: dict[str, Any] | None = None, repo_id: str | None = None) -> Any:
    """Call the registry's /api/v1 `path`; returns the decoded JSON answer (None when empty).

    Raises:
        UsageError: `remote` is the Hugging Face Hub, which has no such API.
        AuthError, NotFoundError, ConflictError, RegistryError: as the registry answered.
    """
    if remote.kind != REGISTRY:
        raise UsageError("the Hugging Face Hub has no registry API for this",
                         hint="use our registry (--registry URL)")
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    with client(remote), translated(remote, repo_id=repo_id):
        response = get_session().request(
            method, f"{remote.endpoint}/api/v1/{path}", json=json, params=params,
            headers=build_hf_headers(token=remote.token or False))
        hf_raise_for_status(response)
        return response.json() if response.content else None


def search(remote: Remote, filters: SearchFilters) -> dict[str, Any]:
    """Adapters matching `filters`: {"items": [...], "total", "page", "per_page", "pages"}.

    Raises:
        RegistryError: a bad filter (e.g. unknown sort) or an unreachable registry.
    """
    params = {"q": filters.text, "task": filters.task, "head_type": filters.head_type,
              "base_model": filters.base_model, "base_hash": filters.base_hash,
              "tag": list(filters.tags), "namespace": filters.namespace, "sort": filters.sort,
              "per_page": filters.limit}
    return native(remote, "GET", "adapters",
                  params={k: v for k, v in params.items() if v not in (None, "", [])})


def version_info(remote: Remote, repo_id: str, version: str) -> dict[str, Any]:
    """The registry's record of one version: yanked?, signer key id, files, manifest."""
    return native(remote, "GET", f"adapters/{repo_id}/versions/{quote(version, safe='')}",
                  repo_id=repo_id)


def upload_key(remote: Remote, private_key: ec.EllipticCurvePrivateKey,
               name: str = "") -> tuple[dict[str, Any], bool]:
    """Register the public half of `private_key` to the token's user, proving possession: the
    registry issues a single-use challenge and this signs it. Returns (key record, created);
    a key registered to this user already is not an error.

    Raises:
        AuthError: not logged in, or a read-only token. ConflictError: the key belongs to
        another account. RegistryError: not a usable key, or the proof was refused.
    """
    from hubcli.signing.keys import key_id, public_pem, sign_challenge

    pem = public_pem(private_key)
    challenge = native(remote, "POST", "keys/challenge")["challenge"]
    body = {"pem": pem.decode("ascii"), "name": name, "challenge": challenge,
            "signature": sign_challenge(private_key, challenge)}
    try:
        return native(remote, "POST", "keys", json=body), True
    except ConflictError:
        mine = [k for k in list_keys(remote) if k["key_id"] == key_id(pem)]
        if not mine:
            raise
        return mine[0], False


def upload_own_key(remote: Remote, name: str = "",
                   passphrase: str | None = None) -> tuple[dict[str, Any], bool]:
    """`upload_key` with the key pair `hub keygen` made, labelled `name` (default: the
    signer name given to `hub keygen --name`); `passphrase` opens an encrypted private key.

    Raises:
        SigningKeyError: there is no key pair yet, the passphrase is missing or wrong, or the
        public key is not the private key's. AuthError, RegistryError: as `upload_key`.
    """
    from hubcli.errors import SigningKeyError
    from hubcli.settings import load_config
    from hubcli.signing.keys import load_private_key, public_key_path, public_pem

    try:
        pem = public_key_path().read_bytes()
    except FileNotFoundError:
        raise SigningKeyError(f"no public key at {public_key_path()}",
                              hint="create your key pair with `hub keygen`") from None
    private_key = load_private_key(passphrase=passphrase)
    if public_pem(private_key).strip() != pem.strip():
        raise SigningKeyError(f"{public_key_path()} is not the public half of your private key",
                              hint="create a new key pair with `hub keygen --force`")
    return upload_key(remote, private_key, name or load_config().get("signer_name") or "")


def list_keys(remote: Remote) -> list[dict[str, Any]]:
    """The signing keys registered to the token's user."""
    return native(remote, "GET", "keys")["items"]


def namespace_keys(remote: Remote, namespace: str) -> list[bytes]:
    """PEM public keys the registry accepts pushes to `namespace` with (a user's keys, or an
    organisation's members' keys): the signers whose bundles from there are trusted on pull."""
    answer = native(remote, "GET", f"namespaces/{quote(namespace, safe='')}/keys")
    return [k["pem"].encode("ascii") for k in answer["items"]]
