"""The adapter page: one version (the latest, or one named in the URL) with its rendered model
card, manifest at a glance, training curve, files, signature and every version; and its "Try
it" form, answered by a `hub serve` instance (`tryit`)."""

from __future__ import annotations

from flask import abort, current_app, render_template, request

from registry_server.db import db
from registry_server.errors import RepoNotFound
from registry_server.httputil import public_url
from registry_server.models import BASE, Adapter, Version
from registry_server.services import bases, dependencies, repos, search
from registry_server.services import versions as version_service
from registry_server.ui import chart, present, queries, tryit
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


@bp.post("/<namespace>/<name>/try")
def try_it(namespace: str, name: str):
    """The "Try it" form: the adapter page again, with what the inference server answered for
    the posted text (a POST: a crawler following links never runs the model).

    Raises: NotFound (404): no inference server is configured. RepoNotFound, RevisionNotFound.
    """
    url = current_app.config["INFERENCE_URL"]
    if not url:
        abort(404)
    found = _readable(namespace, name)
    shown = version_service.get_version(db.session, found, request.form.get("version", ""))
    outcome = tryit.predict(url, f"{found.repo_id}@{shown.version}",
                            request.form.get("text", ""), current_app.config["INFERENCE_TIMEOUT"])
    return _render(found, repos.live_versions(db.session, found), shown, tried=outcome)


def _render(adapter: Adapter, versions: list[Version], shown: Version | None,
            tried: tryit.Outcome | None = None):
    if shown is None:
        return render_template("ui/adapter_empty.html", adapter=adapter)
    if adapter.kind == BASE:
        return _render_base(adapter, shown)
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
        usage=usage(adapter.repo_id, shown.version, manifest), tried=tried,
        example=example_text(manifest),
        try_it=bool(current_app.config["INFERENCE_URL"]),
        hosted_base=bases.find_by_hash(db.session, viewer(), shown.base_model_hash),
        uses=dependencies.uses(db.session, shown),
        used_by=dependencies.used_by(db.session, shown))


def example_text(manifest: dict) -> str:
    """A text to show the adapter on, in the snippets and the "Try it" box."""
    return ("Angela Merkel visited Paris ." if manifest.get("task") == "tagging"
            else "a gripping, beautifully acted film")


def usage(repo_id: str, version: str, manifest: dict) -> list[tuple[str, str, str]]:
    """The "Use it" snippets: (title, label, text), each pinned to the version shown."""
    ref, url, example = f"{repo_id}@{version}", public_url(), example_text(manifest)
    base = manifest.get("base_model", {}).get("name", "")
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


def _render_base(adapter: Adapter, shown: Version):
    """A base model's page: the adapters trained on it, its files and its hashes."""
    return render_template(
        "ui/base_model.html", adapter=adapter, version=shown, card=render_card(shown.card),
        compatible=search.compatible(db.session, viewer(), shown.base_model_hash),
        files=[(f.path, f"{f.blob.size:,} bytes") for f in shown.files],
        load=f'AutoModel.from_pretrained("{adapter.repo_id}", revision="{shown.version}")')
