"""The native JSON API (/api/v1): what the Hub protocol lacks. Described by
/api/v1/openapi.json (registry_server/openapi.json), which a test validates."""

from __future__ import annotations

import json
from datetime import timedelta
from functools import lru_cache
from pathlib import Path

from flask import Blueprint, Response, current_app, jsonify, request

from registry_server.auth import current_user, require_user
from registry_server.db import db
from registry_server.errors import BadRequest, NotFound
from registry_server.httputil import MAX_PAGE, field, int_arg, iso, json_body
from registry_server.models import Adapter, PublicKey, Token, Version
from registry_server.services import accounts, bases, repos, search, versions
from hubcli.format.vocab import TASKS

bp = Blueprint("api", __name__, url_prefix="/api/v1")
OPENAPI = Path(__file__).resolve().parent / "openapi.json"


@lru_cache(maxsize=1)
def _openapi() -> dict:
    return json.loads(OPENAPI.read_text())


@bp.get("/openapi.json")
def openapi() -> Response:
    return jsonify(_openapi())


@bp.get("/health")
def health() -> Response:
    return jsonify({"status": "ok"})


# --- adapters -----------------------------------------------------------------------------

def adapter_json(adapter: Adapter) -> dict:
    latest = adapter.latest
    return {
        "id": adapter.repo_id, "namespace": adapter.namespace.name, "name": adapter.name,
        "private": adapter.private, "description": adapter.description, "task": adapter.task,
        "head_type": adapter.head_type,
        "base_model": {"name": adapter.base_model_name, "content_hash": adapter.base_model_hash},
        "tags": [t.tag for t in adapter.tags], "downloads": adapter.downloads,
        "latest_version": latest.version if latest else None,
        "created_at": iso(adapter.created_at), "updated_at": iso(adapter.updated_at),
    }


def version_json(version: Version, *, detail: bool = False,
                 signers: dict[str, str] | None = None) -> dict:
    """A version's record; `signer` is the account that holds its signing key (None when no
    account does now), never the pusher. `signers` maps key ids to owners for a listing."""
    if signers is None:
        signers = accounts.key_owners(db.session, [version.signer_key_id])
    signer = signers.get(version.signer_key_id)
    out = {
        "version": version.version, "commit": version.commit_sha,
        "created_at": iso(version.created_at), "downloads": version.downloads,
        "yanked": version.yanked, "yank_reason": version.yank_reason,
        "signer_key_id": version.signer_key_id,
        "signer": signer,
        "pushed_by": version.pushed_by.name if version.pushed_by else None,
        "base_model": {"name": version.base_model_name, "content_hash": version.base_model_hash},
    }
    if detail:
        out["manifest"] = version.manifest
        out["files"] = [{"path": f.path, "size": f.blob.size, "sha256": f.blob_sha256}
                        for f in version.files]
    return out


def _page_json(page: search.Page, items: list[dict]) -> dict:
    return {"items": items, "total": page.total, "page": page.page, "per_page": page.per_page,
            "pages": page.pages}


def _paging() -> tuple[int, int]:
    config = current_app.config
    return (int_arg("page", 1, maximum=MAX_PAGE),
            int_arg("per_page", config["PAGE_SIZE"], maximum=config["MAX_PAGE_SIZE"]))


@bp.get("/adapters")
def search_adapters() -> Response:
    page, per_page = _paging()
    args = request.args
    if args.get("task") is not None and args["task"] not in TASKS:
        raise BadRequest(f"query parameter 'task' must be one of {', '.join(TASKS)}, not "
                         f"{args['task']!r}")
    query = search.SearchQuery(
        text=args.get("q", ""), task=args.get("task"), head_type=args.get("head_type"),
        base_model=args.get("base_model"), base_hash=args.get("base_hash"),
        tags=tuple(args.getlist("tag")), namespace=args.get("namespace"),
        sort=args.get("sort", "downloads"), page=page, per_page=per_page)
    result = search.search(db.session, current_user(), query)
    return jsonify(_page_json(result, [adapter_json(a) for a in result.items]))


@bp.get("/adapters/<namespace>/<name>")
def adapter_detail(namespace: str, name: str) -> Response:
    adapter = repos.get_adapter(db.session, namespace, name, current_user())
    out = adapter_json(adapter)
    out["latest"] = version_json(adapter.latest, detail=True) if adapter.latest else None
    return jsonify(out)


@bp.get("/adapters/<namespace>/<name>/versions")
def adapter_versions(namespace: str, name: str) -> Response:
    adapter = repos.get_adapter(db.session, namespace, name, current_user())
    items = repos.live_versions(db.session, adapter)
    signers = accounts.key_owners(db.session, [v.signer_key_id for v in items])
    return jsonify({"items": [version_json(v, signers=signers) for v in items]})


@bp.get("/adapters/<namespace>/<name>/versions/<version>")
def version_detail(namespace: str, name: str, version: str) -> Response:
    adapter = repos.get_adapter(db.session, namespace, name, current_user())
    return jsonify(version_json(versions.get_version(db.session, adapter, version), detail=True))


@bp.post("/adapters/<namespace>/<name>/versions/<version>/yank")
def yank(namespace: str, name: str, version: str) -> Response:
    user = require_user(write=True)
    adapter = repos.get_adapter(db.session, namespace, name, user)
    reason = field(json_body(), "reason", str, required=True)
    return jsonify(version_json(versions.yank(db.session, adapter, user, version, reason)))


@bp.delete("/adapters/<namespace>/<name>/versions/<version>/yank")
def unyank(namespace: str, name: str, version: str) -> Response:
    user = require_user(write=True)
    adapter = repos.get_adapter(db.session, namespace, name, user)
    return jsonify(version_json(versions.unyank(db.session, adapter, user, version)))


@bp.delete("/adapters/<namespace>/<name>/versions/<version>")
def delete_version(namespace: str, name: str, version: str) -> Response:
    user = require_user(write=True)
    adapter = repos.get_adapter(db.session, namespace, name, user)
    versions.delete(db.session, adapter, user, version)
    return Response(status=204)


@bp.get("/bases/<base_hash>")
def hosted_base(base_hash: str) -> Response:
    """Raises: NotFound: no base the caller may read has this content hash."""
    version = bases.find_by_hash(db.session, current_user(), base_hash)
    if version is None:
        raise NotFound(f"no base model with content hash {base_hash} is hosted here",
                       hint="push the base folder with `hub push --base DIR`")
    return jsonify({"id": version.adapter.repo_id, "version": version.version,
                    "commit": version.commit_sha, "content_hash": version.base_model_hash,
                    "tokenizer_hash": version.tokenizer_hash,
                    "model_type": version.manifest.get("model_type", ""),
                    "files": [{"path": f.path, "size": f.blob.size, "sha256": f.blob_sha256}
                              for f in version.files]})


@bp.get("/bases/<base_hash>/adapters")
def compatible(base_hash: str) -> Response:
    page, per_page = _paging()
    result = search.compatible(db.session, current_user(), base_hash, page=page,
                               per_page=per_page)
    items = [{**adapter_json(c.adapter), "compatible_version": c.version.version,
              "compatible_versions": c.versions} for c in result.items]
    return jsonify(_page_json(result, items))


# --- signing keys and tokens ---------------------------------------------------------------

def key_json(key: PublicKey) -> dict:
    return {"key_id": key.key_id, "name": key.name, "pem": key.pem,
            "created_at": iso(key.created_at)}


@bp.get("/keys")
def list_keys() -> Response:
    user = require_user()
    return jsonify({"items": [key_json(k) for k in accounts.list_public_keys(db.session, user)]})


@bp.get("/namespaces/<namespace>/keys")
def namespace_keys(namespace: str) -> Response:
    ns = accounts.get_namespace(db.session, namespace)
    return jsonify({"namespace": ns.name, "kind": ns.kind,
                    "items": [key_json(k) for k in accounts.namespace_public_keys(db.session, ns)]})


@bp.post("/keys/challenge")
def key_challenge() -> Response:
    user = require_user(write=True)
    ttl = timedelta(seconds=current_app.config["KEY_CHALLENGE_TTL"])
    challenge, expires = accounts.issue_key_challenge(db.session, user, ttl)
    return jsonify({"challenge": challenge, "expires_at": iso(expires)}), 201


@bp.post("/keys")
def add_key() -> Response:
    user = require_user(write=True)
    body = json_body()
    key = accounts.register_public_key(
        db.session, user, field(body, "pem", str, required=True),
        challenge=field(body, "challenge", str, required=True),
        signature=field(body, "signature", str, required=True), name=field(body, "name", str, ""))
    return jsonify(key_json(key)), 201


@bp.delete("/keys/<key_id>")
def delete_key(key_id: str) -> Response:
    accounts.delete_public_key(db.session, require_user(write=True), key_id)
    return Response(status=204)


def token_json(token: Token) -> dict:
    return {"id": token.id, "name": token.name, "prefix": token.prefix, "scope": token.scope,
            "created_at": iso(token.created_at), "last_used_at": iso(token.last_used_at),
            "revoked": token.revoked_at is not None}


@bp.get("/tokens")
def list_tokens() -> Response:
    user = require_user()
    return jsonify({"items": [token_json(t) for t in accounts.list_tokens(db.session, user)]})


@bp.post("/tokens")
def create_token() -> Response:
    user = require_user(write=True)
    body = json_body()
    if "name" in body and body["name"] is None:
        raise BadRequest("field 'name' must be of type str, not null")
    token, secret = accounts.create_token(db.session, user, name=field(body, "name", str, None),
                                          scope=field(body, "scope", str, "read"))
    return jsonify({**token_json(token), "token": secret}), 201


@bp.delete("/tokens/<int:token_id>")
def revoke_token(token_id: int) -> Response:
    accounts.revoke_token(db.session, require_user(write=True), token_id)
    return Response(status=204)
