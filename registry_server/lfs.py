"""The Git LFS batch upload path (used by huggingface_hub when Xet is disabled and preupload
answered "lfs").

1. `POST /{ns}/{name}.git/info/lfs/objects/batch` answers, per object, a signed upload URL and a
   verify URL (no actions for objects this adapter has already).
2. The client PUTs the bytes to the upload URL without Authorization: the URL's HMAC signature
   (adapter, oid, size, expiry) is the proof. The bytes are hashed on the way in and stored
   under their SHA-256 only if it equals the oid; the adapter is then allowed to reference it.
3. The client POSTs `{"oid", "size"}` to the verify URL (with its token).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import tempfile
import time
from pathlib import Path

from flask import Blueprint, Response, current_app, jsonify, request
from sqlalchemy import select

from hubcli.fsutil import CHUNK
from registry_server import staging
from registry_server.auth import require_user
from registry_server.blobhttp import get_storage
from registry_server.db import db, insert_ignore
from registry_server.errors import BadRequest, Forbidden, NotFound
from registry_server.httputil import field, json_body, public_url
from registry_server.models import Adapter, LfsUpload, utcnow
from registry_server.services import repos
from registry_server.services.commits import referencable_objects

bp = Blueprint("lfs", __name__)

LFS_JSON = "application/vnd.git-lfs+json"
OID = re.compile(r"^[0-9a-f]{64}$")


def _lfs_json(body: dict, status: int = 200) -> Response:
    response = jsonify(body)
    response.status_code = status
    response.mimetype = LFS_JSON
    return response


@bp.post("/<namespace>/<name>.git/info/lfs/objects/batch")
def batch(namespace: str, name: str) -> Response:
    body = json_body()
    if field(body, "operation", str) != "upload":
        raise BadRequest("only the LFS 'upload' operation is served; download through "
                         "/{repo}/resolve/{revision}/{file}")
    user = require_user(write=True)
    adapter = repos.get_adapter(db.session, namespace, name, user)
    repos.require_writer(db.session, adapter.namespace, user)
    objects = field(body, "objects", list, required=True)
    wanted = [o for o in objects if isinstance(o, dict)]
    known = referencable_objects(db.session, adapter, [str(o.get("oid")) for o in wanted])
    storage = get_storage()
    answer = []
    for i, obj in enumerate(objects):
        oid, size = _object(obj, i)
        entry: dict = {"oid": oid, "size": size, "authenticated": True}
        if size > current_app.config["MAX_FILE_SIZE"]:
            entry["error"] = {"code": 413, "message": f"{size} bytes is more than the "
                              f"{current_app.config['MAX_FILE_SIZE']} allowed per file"}
        elif known.get(oid) != size or not storage.exists(oid):
            entry["actions"] = _actions(adapter, oid, size)
        answer.append(entry)
    return _lfs_json({"transfer": "basic", "objects": answer, "hash_algo": "sha256"})


def _object(obj, i: int) -> tuple[str, int]:
    if not isinstance(obj, dict):
        raise BadRequest(f"objects[{i}] must be an object")
    oid, size = obj.get("oid"), obj.get("size")
    if not isinstance(oid, str) or not OID.fullmatch(oid):
        raise BadRequest(f"objects[{i}].oid must be a 64-hex sha256")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise BadRequest(f"objects[{i}].size must be a non-negative integer")
    return oid, size


def _signature(adapter_id: int, oid: str, size: int, expires: int) -> str:
    key = current_app.config["SECRET_KEY"].encode()
    return hmac.new(key, f"{adapter_id}:{oid}:{size}:{expires}".encode(), hashlib.sha256).hexdigest()


def _actions(adapter: Adapter, oid: str, size: int) -> dict:
    ttl = current_app.config["LFS_URL_TTL"]
    expires = int(time.time()) + ttl
    base = public_url()
    upload = (f"{base}/lfs/upload/{adapter.id}/{oid}?size={size}&expires={expires}"
              f"&signature={_signature(adapter.id, oid, size, expires)}")
    return {"upload": {"href": upload, "expires_in": ttl},
            "verify": {"href": f"{base}/{adapter.repo_id}.git/info/lfs/verify",
                       "expires_in": ttl}}


@bp.put("/lfs/upload/<int:adapter_id>/<oid>")
def upload(adapter_id: int, oid: str) -> Response:
    size, expires = _int_arg("size"), _int_arg("expires")
    expected = _signature(adapter_id, oid, size, expires)
    if not hmac.compare_digest(expected, request.args.get("signature", "")):
        raise Forbidden("the upload URL's signature is not valid")
    if expires < time.time():
        raise Forbidden("the upload URL has expired", hint="run the upload again")
    if request.content_length is not None and request.content_length != size:
        raise BadRequest(f"Content-Length is {request.content_length}, the object has {size}")
    fd, tmp = tempfile.mkstemp(dir=staging.root(current_app), prefix="lfs-")
    try:
        with os.fdopen(fd, "wb") as out:
            digest, received = _receive(out, size)
        if received != size or digest != oid:
            raise BadRequest(f"the uploaded bytes ({received} bytes, sha256 {digest}) do not "
                             f"match the object ({size} bytes, sha256 {oid})")
        get_storage().put(oid, Path(tmp))
    finally:
        Path(tmp).unlink(missing_ok=True)
    insert_ignore(db.session, LfsUpload, [{"adapter_id": adapter_id, "oid": oid, "size": size,
                                           "created_at": utcnow()}])
    db.session.commit()
    return Response(status=200)


def _receive(out, size: int) -> tuple[str, int]:
    """Copy at most size+1 bytes of the body to `out`; returns (sha256, bytes received)."""
    h, received = hashlib.sha256(), 0
    while received <= size and (chunk := request.stream.read(min(CHUNK, size + 1 - received))):
        h.update(chunk)
        out.write(chunk)
        received += len(chunk)
    return h.hexdigest(), received


def _int_arg(name: str) -> int:
    try:
        return int(request.args[name])
    except (KeyError, ValueError):
        raise BadRequest(f"the upload URL lacks a valid {name!r}") from None


@bp.post("/<namespace>/<name>.git/info/lfs/verify")
def verify(namespace: str, name: str) -> Response:
    adapter = repos.get_adapter(db.session, namespace, name, require_user())
    body = json_body()
    oid, size = _object(body, 0)
    row = db.session.scalar(select(LfsUpload).where(LfsUpload.adapter_id == adapter.id,
                                                    LfsUpload.oid == oid))
    if row is None or row.size != size or not get_storage().exists(oid):
        raise NotFound(f"object {oid} ({size} bytes) was not uploaded to {adapter.repo_id}")
    return _lfs_json({})
