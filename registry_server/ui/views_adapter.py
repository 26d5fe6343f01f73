"""The adapter page: one version (the latest, or one named in the URL) with its rendered model
card, manifest at a glance, training curve, files, signature and every version."""

from __future__ import annotations

from flask import render_template

from registry_server.db import db
from registry_server.errors import Forbidden, RepoNotFound
from registry_server.models import Adapter, Version
from registry_server.services import dependencies, repos
from registry_server.services import versions as version_service
from registry_server.ui import chart, present, queries
from registry_server.ui.blueprint import bp
from registry_server.ui.markdown import render_card
from registry_server.ui.signin import viewer


def _readable(namespace: str, name: str) -> Adapter:
    """Raises: RepoNotFound (404): no such adapter. Forbidden (403): private to others."""
    adapter = repos.find_adapter(db.session, namespace, name)
    if adapter is None:
        raise RepoNotFound(f"There is no adapter {namespace}/{name}.",
                           hint=f"search for {name!r} to find adapters with similar names")
    if not repos.can_read(db.session, adapter, viewer()):
        raise Forbidden(f"{namespace}/{name} is private.",
                        hint=f"sign in as a member of {namespace} to see it")
    return adapter


@bp.get("/<namespace>/<name>")
def adapter(namespace: str, name: str):
    found = _readable(namespace, name)
    versions = repos.live_versions(db.session, found)
    # With every version yanked there is no `main`, but the newest one is still worth showing.
    return _render(found, versions, found.latest or (versions[0] if versions else None))


@bp.get("/<namespace>/<name>/versions/<version>")
def adapter_version(namespace: str, name: str, version: str):
    """Raises: RevisionNotFound (404): no such version, or it was deleted."""
    found = _readable(namespace, name)
    shown = version_service.get_version(db.session, found, version)
    return _render(found, repos.live_versions(db.session, found), shown)


def _render(adapter: Adapter, versions: list[Version], shown: Version | None):
    if shown is None:
        return render_template("ui/adapter_empty.html", adapter=adapter)
    manifest = shown.manifest
    epochs = manifest.get("metrics", {}).get("validation", [])
    panels = chart.panels(epochs)
    same_base = queries.search(db.session, viewer(),
                               queries.UiQuery(base_hash=shown.base_model_hash, per_page=1)).total
    return render_template(
        "ui/adapter.html", adapter=adapter, version=shown, versions=versions,
        manifest=manifest, card=render_card(shown.card),
        charts=[(p, chart.render(p, f"chart-{i}")) for i, p in enumerate(panels)],
        ablation=chart.ablation(manifest.get("analysis")),
        epochs=epochs, metric_names=present.metric_names(epochs),
        best=present.best_metrics(manifest), base_rows=present.base_rows(manifest),
        architecture_rows=present.architecture_rows(manifest),
        head_rows=present.head_rows(manifest), labels=manifest.get("head", {}).get("labels", []),
        signature=queries.signature(db.session, shown), same_base=same_base,
        uses=dependencies.uses(db.session, shown),
        used_by=dependencies.used_by(db.session, shown),
        pull=f"hub pull {adapter.repo_id}@{shown.version}")
