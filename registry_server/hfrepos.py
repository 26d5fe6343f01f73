"""The Hub protocol's repository listing and management (see docs/hf-hub-protocol.md):
`list_models` (filters, sort, `Link` pagination), `delete_repo`, `move_repo`,
`list_repo_commits`, `get_paths_info`; `create_tag` and `create_branch` are refused with a
typed error, since a version (named by the bundle's manifest) is the only tag here.
"""

from __future__ import annotations

from urllib.parse import urlencode

from flask import Blueprint, Response, current_app, jsonify, request

from hubcli.format.vocab import TASKS
from registry_server.auth import current_user, require_user
from registry_server.db import db
from registry_server.errors import BadRequest, RepoNotFound, Unsupported
from registry_server.hfapi import REPO_TYPES, file_entry, folder_entry, get_repo, info_json
from registry_server.httputil import MAX_PAGE, field, int_arg, iso, json_body, public_url
from registry_server.models import Version
from registry_server.services import lifecycle, repos, search

bp = Blueprint("hfrepos", __name__)

# The Hub's sort keys -> ours; likes and trending are not kept here, so they are refused.
SORTS = {"downloads": "downloads", "lastModified": "recent", "last_modified": "recent",
         "createdAt": "created", "created_at": "created", "id": "name"}
BASE_MODEL_FILTER = "base_model:"


def _split_id(repo_id: str | None, what: str) -> tuple[str, str]:
    parts = (repo_id or "").split("/")
    if len(parts) != 2 or not all(parts):
        raise BadRequest(f"{what} must be NAMESPACE/NAME, not {repo_id!r}")
    return parts[0], parts[1]


def _model_type(body: dict) -> None:
    if field(body, "type", str, "model") != "model":
        raise RepoNotFound(f"this registry holds models only, not {body['type']}s")


@bp.get("/api/models")
def list_models() -> Response:
    """Search, author, filter (tags, tasks, `base_model:NAME`), sort, limit (the page size);
    the next page is named by a `Link: <...>; rel="next"` header, which the client follows."""
    args = request.args
    page = int_arg("p", 1, maximum=MAX_PAGE)
    per_page = int_arg("limit", current_app.config["PAGE_SIZE"],
                       maximum=current_app.config["MAX_PAGE_SIZE"])
    sort = args.get("sort", "downloads")
    if sort not in SORTS:
        raise Unsupported(f"sort {sort!r} is not supported; use one of "
                          f"{', '.join(sorted(set(SORTS) - {'last_modified', 'created_at'}))}")
    task, base_model, tags = _filters(args.getlist("filter"))
    query = search.SearchQuery(text=args.get("search", ""), namespace=args.get("author"),
                               task=task, base_model=base_model, tags=tags, kind=None,
                               sort=SORTS[sort],
                               page=page, per_page=per_page)
    result = search.search(db.session, current_user(), query)
    full = args.get("full", "").lower() == "true"
    response = jsonify([info_json(a, a.latest, siblings=full) for a in result.items])
    if page < result.pages:
        following = urlencode([(k, v) for k, v in args.items(multi=True) if k != "p"]
                              + [("p", str(page + 1))])
        response.headers["Link"] = f'<{public_url()}{request.path}?{following}>; rel="next"'
    return response


def _filters(values: list[str]) -> tuple[str | None, str | None, tuple[str, ...]]:
    """(task, base model name, tags) from `filter` values; the client sends a list as
    repeated parameters or one comma-separated value.

    Raises:
        BadRequest: two different tasks or base models (nothing has both).
    """
    task = base_model = None
    tags: list[str] = []
    for value in (v.strip() for raw in values for v in raw.split(",") if v.strip()):
        if value in TASKS:
            if task not in (None, value):
                raise BadRequest(f"filter names two tasks, {task!r} and {value!r}")
            task = value
        elif value.startswith(BASE_MODEL_FILTER):
            name = value[len(BASE_MODEL_FILTER):]
            if base_model not in (None, name):
                raise BadRequest(f"filter names two base models, {base_model!r} and {name!r}")
            base_model = name
        else:
            tags.append(value)
    return task, base_model, tuple(tags)


@bp.delete("/api/repos/delete")
def delete_repo() -> Response:
    user = require_user(write=True)
    body = json_body()
    _model_type(body)
    name = field(body, "name", str, required=True)
    adapter = repos.get_adapter(db.session, field(body, "organization", str) or user.name, name,
                                user)
    lifecycle.delete_repo(db.session, adapter, user)
    return jsonify({"deleted": adapter.repo_id})


@bp.post("/api/repos/move")
def move_repo() -> Response:
    user = require_user(write=True)
    body = json_body()
    _model_type(body)
    namespace, name = _split_id(field(body, "fromRepo", str, required=True), "fromRepo")
    to_namespace, to_name = _split_id(field(body, "toRepo", str, required=True), "toRepo")
    adapter = repos.get_adapter(db.session, namespace, name, user)
    moved = lifecycle.move_repo(db.session, adapter, user, to_namespace, to_name)
    return jsonify({"url": f"{public_url()}/{moved.repo_id}", "name": moved.repo_id})


@bp.get(f"/api/<{REPO_TYPES}:repo_type>/<namespace>/<name>/commits/<revision>")
def list_commits(repo_type: str, namespace: str, name: str, revision: str) -> Response:
    """The history leading to `revision`: each version pushed before it (and it), newest
    first. Deleted versions are gone; yanked ones are still history."""
    adapter = get_repo(repo_type, namespace, name)
    head = repos.resolve_revision(db.session, adapter, revision).version
    history = [v for v in repos.live_versions(db.session, adapter)
               if (v.created_at, v.id) <= (head.created_at, head.id)]
    history.sort(key=lambda v: (v.created_at, v.id), reverse=True)
    return jsonify([_commit_json(v) for v in history])


def _commit_json(version: Version) -> dict:
    title = version.summary.splitlines()[0] if version.summary.strip() else \
        f"version {version.version}"
    return {"id": version.commit_sha,
            "authors": [{"user": version.pushed_by.name if version.pushed_by else ""}],
            "date": iso(version.created_at), "title": title,
            "message": version.summary, "version": version.version}


@bp.post(f"/api/<{REPO_TYPES}:repo_type>/<namespace>/<name>/paths-info/<revision>")
def paths_info(repo_type: str, namespace: str, name: str, revision: str) -> Response:
    """The files and folders among `paths` (a form field, repeated) at `revision`; paths that
    do not exist are left out, as the Hub does."""
    adapter = get_repo(repo_type, namespace, name)
    version = repos.resolve_revision(db.session, adapter, revision).version
    paths = request.form.getlist("paths") or (request.get_json(silent=True) or {}).get("paths")
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise BadRequest("field 'paths' must list the paths to describe")
    files = {f.path: f for f in version.files}
    answer = []
    for path in (p.strip("/") for p in paths):
        if path in files:
            answer.append(file_entry(files[path]))
        elif path and any(f.startswith(path + "/") for f in files):
            answer.append(folder_entry(path))
    return jsonify(answer)


@bp.post(f"/api/<{REPO_TYPES}:repo_type>/<namespace>/<name>/tag/<path:revision>")
def create_tag(repo_type: str, namespace: str, name: str, revision: str) -> Response:
    adapter = get_repo(repo_type, namespace, name)
    raise Unsupported(f"{adapter.repo_id}: tags are versions here; one is created by pushing a "
                      "bundle whose manifest.json names it", repo_id=adapter.repo_id,
                      hint="set 'version' in manifest.json, then bundle, sign and push")


@bp.post(f"/api/<{REPO_TYPES}:repo_type>/<namespace>/<name>/branch/<path:branch>")
@bp.delete(f"/api/<{REPO_TYPES}:repo_type>/<namespace>/<name>/branch/<path:branch>")
def branch(repo_type: str, namespace: str, name: str, branch: str) -> Response:
    adapter = get_repo(repo_type, namespace, name)
    raise Unsupported(f"{adapter.repo_id}: branches are not supported; {repos.MAIN} is always "
                      "the newest version that is not yanked", repo_id=adapter.repo_id,
                      hint="pin a version (NAME@1.2.0) instead of a branch")
