"""Browsing: the home page, search (every filter in the URL, so a search can be bookmarked),
and the pages of users and organisations."""

from __future__ import annotations

import re

from flask import current_app, render_template, request
from werkzeug.datastructures import MultiDict

from registry_server.db import db
from registry_server.services import accounts
from registry_server.ui import queries
from registry_server.ui.blueprint import bp
from hubcli.format.vocab import HEAD_TYPES, TASKS
from registry_server.ui.signin import viewer

SUMMARY = "ui_summary"  # app.extensions key of the app's queries.SummaryCache
PER_PAGE = 20
HOME_LIST = 6
MAX_PAGE = 10_000
HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _page_arg(raw: str | None) -> int:
    try:
        return min(max(int(raw or 1), 1), MAX_PAGE)
    except ValueError:
        return 1


def parse_query(args: MultiDict) -> queries.UiQuery:
    """The search a URL describes. Lenient, as befits a browser: an unknown sort falls back to
    best match, a bad page number to 1; `tag` may repeat or hold comma-separated tags; a bare
    64-hex base hash gets its "sha256:" prefix."""
    tags = tuple(dict.fromkeys(t for raw in args.getlist("tag")
                               for t in re.split(r"[,\s]+", raw.strip()) if t))
    base_hash = args.get("base_hash", "").strip().lower()
    if HEX64.match(base_hash):
        base_hash = "sha256:" + base_hash
    sort = args.get("sort", "best")
    return queries.UiQuery(
        text=args.get("q", "").strip(), task=args.get("task") or None,
        head_type=args.get("head_type") or None, base_model=args.get("base_model") or None,
        base_hash=base_hash or None, tags=tags, signed_only=args.get("signed") == "1",
        sort=sort if sort in queries.UI_SORTS else "best", page=_page_arg(args.get("page")),
        per_page=PER_PAGE)


def _signatures(*pages: queries.Page) -> dict[int, queries.Signature]:
    """The signature badge of every listed adapter's latest version, by version id."""
    return queries.signatures(db.session, (a.latest for p in pages for a in p.items))


def _summary() -> queries.Summary:
    return current_app.extensions[SUMMARY].get(db.session)


@bp.get("/")
def home():
    session, user = db.session, viewer()
    recent = queries.search(session, user, queries.UiQuery(sort="recent", per_page=HOME_LIST))
    popular = queries.search(session, user, queries.UiQuery(per_page=HOME_LIST))
    return render_template("ui/home.html", summary=_summary(), recent=recent, popular=popular,
                           signatures=_signatures(recent, popular))


@bp.get("/search")
def search():
    session, user = db.session, viewer()
    query = parse_query(request.args)
    results = queries.search(session, user, query)
    return render_template(
        "ui/search.html", query=query, results=results, signatures=_signatures(results),
        tasks=TASKS, head_types=HEAD_TYPES, summary=_summary(), sorts=queries.UI_SORTS)


@bp.get("/<namespace>")
def namespace(namespace: str):
    session, user = db.session, viewer()
    owner = accounts.get_namespace(session, namespace)
    query = queries.UiQuery(namespace=owner.name, sort="recent",
                            page=_page_arg(request.args.get("page")), per_page=PER_PAGE)
    if owner.kind == "org":
        related = [u.name for u in accounts.org_members(session, owner)]
    else:
        related = [o.name for o in accounts.user_orgs(session, owner.user)]
    results = queries.search(session, user, query)
    return render_template("ui/namespace.html", owner=owner, related=sorted(related),
                           results=results, signatures=_signatures(results))
