"""The adapter page: one version (the latest, or one named in the URL) with its rendered model
card, manifest at a glance, training curve, files, signature and every version."""

from __future__ import annotations

from flask import render_template

from registry_server.db import db
from registry_server.errors import RepoNotFound
from registry_server.httputil import public_url
from registry_server.models import Adapter, Version
from registry_server.services import repos
from registry_server.services import versions as version_service
from registry_server.ui import chart, present, queries
from registry_server.ui.blueprint import bp
from registry_server.ui.markdown import SHOWN_ELSEWHERE, render_card
from registry_server.ui.signin import viewer


def _readable(namespace: str, name: str) -> Adapter:
    """Raises: RepoNotFound (404): no such adapter, or a private one the viewer may not read
    (the same answer, so that a page does not confirm that a private adapter exists)."""
    adapter = repos.find_adapter(db.session, namespace, name)
    if adapter is None or not repos.can_read(db.session, adapter, viewer()):
        raise RepoNotFound(f"There is no adapter {namespace}/{name}"
                           f"{'' if viewer() else ' that you can see without signing in'}.")
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
        manifest=manifest, card=render_card(shown.card, SHOWN_ELSEWHERE),
        charts=[(p, chart.render(p, f"chart-{i}")) for i, p in enumerate(panels)],
        ablation=chart.ablation(manifest.get("analysis")),
        epochs=epochs, metric_names=present.metric_names(epochs),
        best=present.best_metrics(manifest), warnings=present.metric_warnings(manifest),
        license=present.license_of(manifest, shown.card), base_rows=present.base_rows(manifest),
        architecture_rows=present.architecture_rows(manifest),
        head_rows=present.head_rows(manifest), labels=manifest.get("head", {}).get("labels", []),
        signature=queries.signature(db.session, shown), same_base=same_base,
        usage=usage(adapter.repo_id, shown.version, manifest))


def usage(repo_id: str, version: str, manifest: dict) -> list[tuple[str, str, str]]:
    """The "Use it" snippets: (title, label, text), each pinned to the version shown."""
    ref, url = f"{repo_id}@{version}", public_url()
    base = manifest.get("base_model", {}).get("name", "")
    example = "Angela Merkel visited Paris ." if manifest.get("task") == "tagging" else \
        "a gripping, beautifully acted film"
    return [
        ("Command line", "Pull and predict commands",
         f"hub pull {ref}   # checks the signature and every digest\n"
         f'hub predict {ref} "{example}"'),
        ("Python", "Python AdapterHub snippet",
         "from hubcli.api import AdapterHub\n"
         "from hubcli.remote.credentials import registry_remote\n"
         "from hubcli.remote.pull import pull\n\n"
         f'pulled = pull("{ref}", registry_remote("{url}"))  # verified\n'
         f'hub = AdapterHub(base="{base}")\n'
         "hub.load(pulled.record.path)\n"
         f'print(hub.predict(["{example}"]))'),
        ("huggingface_hub", "huggingface_hub snippet",
         "import os\n"
         f'os.environ["HF_ENDPOINT"] = "{url}"  # before importing huggingface_hub\n'
         "from huggingface_hub import snapshot_download\n\n"
         f'folder = snapshot_download("{repo_id}", revision="{version}")  # not verified'),
    ]
