"""The subset of the Hugging Face Hub HTTP API that huggingface_hub and transformers use
(see docs/hf-hub-protocol.md): whoami, create repo, preupload, commit, model info, tree, refs,
and resolve (HEAD/GET with ranges). Only model repositories exist here.
"""

from __future__ import annotations

import re

from flask import Blueprint, Response, current_app, jsonify, request

from hubcli.format import error_codes as codes
from hubcli.format.manifest import WEIGHTS_FILES
from registry_server import hf_commit, staging
from registry_server.auth import current_user, require_token, require_user
from registry_server.blobhttp import blob_response, get_storage
from registry_server.db import db
from registry_server.errors import (BadRequest, Conflict, EntryNotFound, PayloadTooLarge,
                                    RepoNotFound, Unsupported, error_response, header_safe)
from registry_server.httputil import field, iso, json_body, public_url
from registry_server.models import BASE, Adapter, Version, VersionFile
from registry_server.services import accounts, commits, downloads, repos

bp = Blueprint("hfapi", __name__)

# Shown as Git LFS files (tree, siblings), like weights on the Hub.
LFS_SUFFIXES = (".safetensors",)
LFS_POINTER_SIZE = 134
WARNING_HEADER = "X-Registry-Warning"
REPO_TYPES = "any(models,datasets,spaces)"
# What `update_repo_settings` may change here (gated only to false: never gated).
SETTINGS = frozenset({"private", "visibility", "gated"})


def get_repo(repo_type: str, namespace: str, name: str) -> Adapter:
    if repo_type != "models":
        raise RepoNotFound(f"{repo_type}/{namespace}/{name}: this registry holds models only",
                           repo_id=f"{namespace}/{name}")
    return repos.get_adapter(db.session, namespace, name, current_user())


@bp.get("/api/whoami-v2")
def whoami() -> Response:
    token = require_token()
    user = token.user
    orgs = accounts.user_orgs(db.session, user)
    return jsonify({
        "type": "user", "id": str(user.id), "name": user.name, "fullname": user.name,
        "isPro": False, "canPay": False, "emailVerified": True,
        "orgs": [{"type": "org", "name": o.name, "fullname": o.name} for o in orgs],
        "auth": {"type": "access_token",
                 "accessToken": {"displayName": token.name, "role": token.scope}},
    })


@bp.post("/api/repos/create")
def create_repo() -> Response:
    user = require_user(write=True)
    body = json_body()
    name = field(body, "name", str, required=True)
    namespace = field(body, "organization", str) or user.name
    if field(body, "type", str, "model") != "model":
        raise BadRequest("this registry holds model repositories only")
    private = field(body, "private", bool) or field(body, "visibility", str) == "private"
    url = f"{public_url()}/{namespace}/{name}"
    try:
        repos.create_adapter(db.session, user, namespace, name, private=bool(private))
    except Conflict as e:
        # huggingface_hub's exist_ok=True needs the url in the 409's body.
        return error_response(str(e), 409, code=e.code, extra={"url": url})
    return jsonify({"url": url, "name": f"{namespace}/{name}"})


@bp.put(f"/api/<{REPO_TYPES}:repo_type>/<namespace>/<name>/settings")
def repo_settings(repo_type: str, namespace: str, name: str) -> Response:
    user = require_user(write=True)
    adapter = get_repo(repo_type, namespace, name)
    body = json_body()
    unknown = sorted(set(body) - SETTINGS)
    if unknown:
        raise Unsupported(f"repository setting(s) {', '.join(unknown)} not supported here; "
                          f"only {', '.join(sorted(SETTINGS))}", repo_id=adapter.repo_id)
    if body.get("gated") not in (None, False):
        raise Unsupported(f"gated access ({body['gated']!r}) is not supported: a repository "
                          "here is public or private", repo_id=adapter.repo_id,
                          hint="make it private (visibility='private') and add readers to "
                               "its organisation")
    private = field(body, "private", bool)
    if private is None and field(body, "visibility", str) is not None:
        private = body["visibility"] == "private"
    if private is not None:
        repos.set_private(db.session, adapter, user, private)
    return jsonify({"private": adapter.private})


@bp.post("/api/validate-yaml")
def validate_yaml() -> Response:
    json_body()  # malformed JSON is still a 400
    return jsonify({"errors": [], "warnings": []})


@bp.post(f"/api/<{REPO_TYPES}:repo_type>/<namespace>/<name>/preupload/<revision>")
def preupload(repo_type: str, namespace: str, name: str, revision: str) -> Response:
    user = require_user(write=True)
    adapter = get_repo(repo_type, namespace, name)
    repos.require_writer(db.session, adapter.namespace, user)
    files = field(json_body(), "files", list, required=True)
    current = _files_at(adapter, revision)
    answer = []
    for i, entry in enumerate(files):
        if not isinstance(entry, dict):
            raise BadRequest(f"files[{i}] must be an object")
        path = hf_commit.check_path(entry.get("path"), f"files[{i}]: ")
        size = field(entry, "size", int, 0)
        mode = "lfs" if _lfs_wanted(size) else "regular"
        existing = current.get(path)
        oid = None
        if existing is not None:
            oid = existing.blob_sha256 if mode == "lfs" else existing.blob.git_oid
        answer.append({"path": path, "uploadMode": mode, "shouldIgnore": False, "oid": oid})
    return jsonify({"files": answer})


def _lfs_wanted(size: int) -> bool:
    """Only clients that do plain Git LFS get "lfs": huggingface_hub >= 1.20 sends every "lfs"
    file to Xet (which this registry does not speak) when hf_xet is installed, as it is with
    2.x, so it gets "regular" (inline, read in bounded memory) unless it opted in to LFS with
    `X-Hub-Lfs: 1` (our client, which turns Xet off)."""
    if size < current_app.config["LFS_MIN_SIZE"]:
        return False
    if request.headers.get("X-Hub-Lfs") == "1":
        return True
    return current_app.config["LFS_UPLOADS"] and not _sends_lfs_to_xet(request.user_agent.string)


XET_CLIENT = re.compile(r"\bhf_hub/(\d+)\.(\d+)")
FIRST_XET_ONLY = (1, 20)  # the first huggingface_hub that uploads "lfs" files through Xet only


def _sends_lfs_to_xet(user_agent: str) -> bool:
    """Whether the client is a huggingface_hub that would send "lfs" files to Xet."""
    m = XET_CLIENT.search(user_agent)
    return m is not None and (int(m[1]), int(m[2])) >= FIRST_XET_ONLY


def _files_at(adapter: Adapter, revision: str) -> dict[str, VersionFile]:
    if revision == repos.MAIN and adapter.latest is None:
        return {}
    version = repos.resolve_revision(db.session, adapter, revision).version
    return {f.path: f for f in version.files}


@bp.post(f"/api/<{REPO_TYPES}:repo_type>/<namespace>/<name>/commit/<revision>")
def commit(repo_type: str, namespace: str, name: str, revision: str) -> Response:
    user = require_user(write=True)
    adapter = get_repo(repo_type, namespace, name)
    if revision != repos.MAIN:
        raise BadRequest(f"commits go to {repos.MAIN}; the version comes from manifest.json",
                         hint=f"push with revision={repos.MAIN}")
    config = current_app.config
    limits = commits.Limits(config["MAX_FILE_SIZE"], config["MAX_BUNDLE_SIZE"],
                            config["MAX_COMMIT_FILES"])
    limit = hf_commit.request_limit(limits)
    if (request.content_length or 0) > limit:
        # Refused before reading; a chunked body is counted as it is read.
        raise PayloadTooLarge(f"the commit has {request.content_length} bytes; at most {limit} "
                              "are allowed", hint="raise HUB_REGISTRY_MAX_BUNDLE_SIZE")
    with staging.workdir(current_app, "commit-") as work:
        payload = hf_commit.parse(request.stream, workdir=work, limits=limits)
        result = commits.commit(db.session, get_storage(), adapter, user, payload,
                                limits=limits, workdir=work)
    sha = result.version.commit_sha
    return jsonify({"commitOid": sha, "commitUrl": f"{public_url()}/{adapter.repo_id}/commit/{sha}",
                    "success": True, "pullRequestUrl": None,
                    "version": result.version.version, "created": result.created})


@bp.get(f"/api/<{REPO_TYPES}:repo_type>/<namespace>/<name>/xet-write-token/<revision>")
@bp.get(f"/api/<{REPO_TYPES}:repo_type>/<namespace>/<name>/xet-read-token/<revision>")
def xet_token(repo_type: str, namespace: str, name: str, revision: str) -> Response:
    return error_response("this registry does not speak Xet", 501, code=codes.XET_UNSUPPORTED,
                          hint="set HF_HUB_DISABLE_XET=1 (the registry answers 'regular' "
                               "uploads unless LFS is enabled)")


@bp.get(f"/api/<{REPO_TYPES}:repo_type>/<namespace>/<name>")
@bp.get(f"/api/<{REPO_TYPES}:repo_type>/<namespace>/<name>/revision/<revision>")
def model_info(repo_type: str, namespace: str, name: str, revision: str | None = None) -> Response:
    adapter = get_repo(repo_type, namespace, name)
    version = None
    if revision is not None or adapter.latest is not None:
        resolved = repos.resolve_revision(db.session, adapter, revision or repos.MAIN)
        version = resolved.version
    response = jsonify(info_json(adapter, version))
    _warn_if_yanked(response, version)
    return response


def info_json(adapter: Adapter, version: Version | None, *, siblings: bool = True) -> dict:
    """A repository as `model_info` and `list_models` read it."""
    files = version.files if version is not None and siblings else []
    return {
        "_id": str(adapter.id), "id": adapter.repo_id, "modelId": adapter.repo_id,
        "author": adapter.namespace.name, "sha": version.commit_sha if version else None,
        "lastModified": iso(version.created_at if version else adapter.updated_at),
        "createdAt": iso(adapter.created_at), "private": adapter.private, "disabled": False,
        "gated": False, "downloads": adapter.downloads, "likes": 0,
        "library_name": "transformers" if adapter.kind == BASE else "adapter-hub", "tags": [t.tag for t in adapter.tags],
        "siblings": [_sibling(f) for f in files],
    }


def _sibling(f: VersionFile) -> dict:
    entry = {"rfilename": f.path, "size": f.blob.size, "blobId": f.blob.git_oid}
    if f.path.endswith(LFS_SUFFIXES):
        entry["lfs"] = {"size": f.blob.size, "sha256": f.blob_sha256,
                        "pointerSize": LFS_POINTER_SIZE}
    return entry


@bp.get(f"/api/<{REPO_TYPES}:repo_type>/<namespace>/<name>/tree/<revision>")
@bp.get(f"/api/<{REPO_TYPES}:repo_type>/<namespace>/<name>/tree/<revision>/<path:path>")
def tree(repo_type: str, namespace: str, name: str, revision: str, path: str = "") -> Response:
    adapter = get_repo(repo_type, namespace, name)
    version = repos.resolve_revision(db.session, adapter, revision).version
    recursive = request.args.get("recursive", "false").lower() == "true"
    prefix = path.strip("/") + "/" if path.strip("/") else ""
    entries: dict[str, dict] = {}
    for f in version.files:
        if not f.path.startswith(prefix):
            continue
        rest = f.path[len(prefix):]
        if "/" in rest and not recursive:
            folder = prefix + rest.split("/", 1)[0]
            entries[folder] = folder_entry(folder)
            continue
        entries[f.path] = file_entry(f)
    if prefix and not entries:
        raise EntryNotFound(f"{adapter.repo_id}@{version.version} has no folder {path!r}",
                            repo_id=adapter.repo_id, revision=revision,
                            headers={"X-Repo-Commit": version.commit_sha})
    return jsonify(list(entries.values()))


def file_entry(f: VersionFile) -> dict:
    """A file as the tree and paths-info list it."""
    entry = {"type": "file", "path": f.path, "oid": f.blob.git_oid, "size": f.blob.size}
    if f.path.endswith(LFS_SUFFIXES):
        entry["lfs"] = {"oid": f.blob_sha256, "size": f.blob.size,
                        "pointerSize": LFS_POINTER_SIZE}
    return entry


def folder_entry(path: str) -> dict:
    return {"type": "directory", "path": path, "oid": "0" * 40}


@bp.get(f"/api/<{REPO_TYPES}:repo_type>/<namespace>/<name>/refs")
def refs(repo_type: str, namespace: str, name: str) -> Response:
    adapter = get_repo(repo_type, namespace, name)
    main = adapter.latest
    tags = [{"name": v.version, "ref": f"refs/tags/{v.version}", "targetCommit": v.commit_sha}
            for v in repos.live_versions(db.session, adapter)]
    branches = ([{"name": repos.MAIN, "ref": f"refs/heads/{repos.MAIN}",
                  "targetCommit": main.commit_sha}] if main else [])
    return jsonify({"branches": branches, "tags": tags, "converts": [], "pullRequests": []})


@bp.route("/<namespace>/<name>/resolve/<revision>/<path:filename>", methods=["GET", "HEAD"])
def resolve(namespace: str, name: str, revision: str, filename: str) -> Response:
    f = repos.locate_file(db.session, namespace, name, revision, filename, current_user())
    response = blob_response(get_storage(), f.sha256, f.size,
                             redirect_ttl=current_app.config["DOWNLOAD_URL_TTL"])
    response.headers["X-Repo-Commit"] = f.commit_sha
    response.headers["X-Linked-Size"] = str(f.size)
    if response.status_code != 302:
        response.headers["Cache-Control"] = ("public, max-age=31536000, immutable"
                                             if f.pinned and not f.private else "no-cache")
    if f.warning:
        response.headers[WARNING_HEADER] = header_safe(f.warning)
    if _is_download(f, response):
        current_app.extensions[downloads.EXTENSION].add(f.version_id, f.adapter_id)
    return response


def _is_download(f: repos.FileRef, response: Response) -> bool:
    """One download = one fetch of the weights from their first byte (not HEAD, not a resume);
    a redirect to the store counts as the fetch it starts."""
    if request.method != "GET" or f.path not in WEIGHTS_FILES:
        return False
    from_start = request.range is None or request.range.ranges[0][0] == 0
    return response.status_code == 200 or (
        response.status_code in (206, 302) and from_start)


def _warn_if_yanked(response: Response, version: Version | None) -> None:
    warning = repos.yank_warning(version) if version is not None else None
    if warning:
        response.headers[WARNING_HEADER] = header_safe(warning)


@bp.route("/datasets/<path:rest>", methods=["GET", "HEAD", "POST"])
@bp.route("/spaces/<path:rest>", methods=["GET", "HEAD", "POST"])
def other_repo_types(rest: str) -> Response:
    raise RepoNotFound("this registry holds models only")
