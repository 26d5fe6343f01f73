"""Seed data and fixtures for the web UI tests: signed bundles published through the service
layer (`commits.commit`, the same policy an HTTP push goes through), web passwords, and helpers
to sign in with a test client, and a stub of `hub serve`'s /v1/predict for the "Try it" box.
Test modules import the fixtures they use from here."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import SigningKey, new_signing_key, pg_schema_url, signed_bundle
from factories import refresh_files
from hubcli.signing.sign import sign_bundle
from registry_server import create_app
from registry_server.blobhttp import get_storage
from registry_server.db import db
from registry_server.services import accounts, commits, repos, versions
from registry_server.ui import passwords

PASSWORD = "correct horse battery"
EVIL_CARD = """---
license: apache-2.0
secret_front_matter: do-not-show
---
# Evil card

<script>alert("card")</script>
<img src=x onerror="alert('img')">
[click me](javascript:alert('link'))

Some **bold** text.
"""
EPOCHS = [{"epoch": 1, "train_loss": 0.69, "loss": 0.6, "accuracy": 0.7, "f1": 0.66},
          {"epoch": 2, "train_loss": 0.41, "loss": 0.45, "accuracy": 0.82, "f1": 0.8},
          {"epoch": 3, "train_loss": 0.3, "loss": 0.41, "accuracy": 0.86, "f1": 0.85}]


def publish(app, user: str, folder: Path, *, namespace: str | None = None,
            private: bool = False) -> None:
    """Push the bundle in `folder` as `user` to `namespace` (default: the user's own)."""
    with db.session_scope(app) as session, tempfile.TemporaryDirectory() as tmp:
        pusher = accounts.get_user(session, user)
        name = json.loads((folder / "manifest.json").read_text())["name"]
        ns = namespace or user
        adapter = (repos.find_adapter(session, ns, name)
                   or repos.create_adapter(session, pusher, ns, name, private=private))
        staged = []
        for path in sorted(folder.iterdir()):
            copy = Path(tmp) / f"staged-{path.name}"
            shutil.copyfile(path, copy)
            data = path.read_bytes()
            staged.append(commits.StagedFile(path.name, copy, hashlib.sha256(data).hexdigest(),
                                             len(data)))
        work = Path(tmp) / "work"
        work.mkdir()
        config = app.config
        commits.commit(session, get_storage(app), adapter, pusher,
                       commits.CommitRequest(staged=staged),
                       limits=commits.Limits(config["MAX_FILE_SIZE"], config["MAX_BUNDLE_SIZE"],
                                             config["MAX_COMMIT_FILES"]), workdir=work)


def evil_bundle(path: Path, key: SigningKey) -> Path:
    """A signed bundle whose model card tries script, raw HTML and a javascript: link."""
    signed_bundle(path, key, name="evil-card")
    (path / "model.sig").unlink()
    (path / "README.md").write_text(EVIL_CARD)
    refresh_files(path)
    sign_bundle(path, key.private_path)
    return path


def seed(app, root: Path, key: SigningKey, other_key: SigningKey) -> None:
    """alice (password PASSWORD, key registered) publishes sst2-sentiment 0.9.0 (yanked),
    1.0.0 and 1.1.0 (5 downloads), and conll-ner (2 downloads); bob publishes evil-card;
    acme (alice's org) has a private adapter; carol has no password and no adapters."""
    with db.session_scope(app) as session:
        for name, signing in (("alice", key), ("bob", other_key), ("carol", None)):
            user = accounts.create_user(session, name)
            if signing is not None:
                accounts.add_public_key(session, user, signing.public_pem, name=f"{name} laptop")
        passwords.set_password(session, accounts.get_user(session, "alice"), PASSWORD)
        passwords.set_password(session, accounts.get_user(session, "bob"), PASSWORD)
        accounts.create_org(session, "acme", members=["alice"])
    sst2 = dict(description="Sentiment of English movie reviews (SST-2).",
                tags=["sentiment", "english"], metrics={"validation": EPOCHS,
                                                        "best": {"accuracy": 0.86, "f1": 0.85}},
                analysis={"ablation": {"data": "dev.tsv", "metric": "accuracy", "full": 0.86,
                                       "majority": 0.51, "spans": [[0.85, 0.52], [None, 0.8]]}})
    for version in ("0.9.0", "1.0.0", "1.1.0"):
        publish(app, "alice", signed_bundle(root / f"sst2-{version}", key, name="sst2-sentiment",
                                            version=version, **sst2))
    publish(app, "alice", signed_bundle(
        root / "ner", key, name="conll-ner", task="tagging",
        description="Named entities (CoNLL-2003 style) with IOB2 tags.", tags=["ner"],
        head={"type": "token_classification", "num_outputs": 5,
              "labels": ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"], "label_scheme": "IOB2"},
        base_model={"name": "bert-base-cased", "content_hash": "sha256:" + "ef" * 32}))
    publish(app, "bob", evil_bundle(root / "evil", other_key))
    publish(app, "alice", signed_bundle(root / "secret", key, name="secret-adapter",
                                        description="Internal only."),
            namespace="acme", private=True)
    with db.session_scope(app) as session:
        adapter = repos.find_adapter(session, "alice", "sst2-sentiment")
        versions.yank(session, adapter, accounts.get_user(session, "alice"), "0.9.0",
                      "labels were swapped")
        # Distinct download counts, so "most downloaded" and "recent" order differently.
        for repo, times in (("sst2-sentiment", 5), ("conll-ner", 2)):
            adapter = repos.find_adapter(session, "alice", repo)
            adapter.downloads = adapter.latest.downloads = times
        session.commit()

DATABASES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


def make_app(kind: str, root: Path):
    """An app over a fresh database (`kind` sqlite or postgres); yields it, then cleans up."""
    pg = pg_schema_url() if kind == "postgres" else None
    url = next(pg) if pg else f"sqlite:///{root / 'registry.db'}"
    app = create_app({"INSTANCE_PATH": str(root / "instance"), "DATABASE_URL": url,
                      "SECRET_KEY": "test-secret", "AUTO_MIGRATE": True})
    yield app
    db.engine(app).dispose()
    if pg:
        next(pg, None)


@pytest.fixture(scope="module", params=DATABASES)
def seeded_app(request, tmp_path_factory):
    """A registry holding `seed`'s data, shared by a module's read-only tests."""
    root = tmp_path_factory.mktemp("ui-seeded")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HUB_HOME", str(root / "hub_home"))
        apps = make_app(request.param, root)
        app = next(apps)
        keys = root / "keys"
        seed(app, root / "bundles", new_signing_key(keys), new_signing_key(keys))
    yield app
    next(apps, None)


def csrf_token(html: str) -> str:
    match = CSRF_FIELD.search(html)
    assert match, "the page has no form with a CSRF token"
    return match.group(1)


def sign_in(client, name: str = "alice", password: str = PASSWORD):
    """Sign `client` in through the login form; returns the response to the POST."""
    token = csrf_token(client.get("/login").get_data(as_text=True))
    return client.post("/login", data={"csrf_token": token, "name": name,
                                       "password": password, "next": "/"})


# --- a stub of `hub serve` for the "Try it" box -------------------------------------------

NER_TEXT = "Angela Merkel visited Paris ."
ANSWERS = {
    "alice/sst2-sentiment@1.1.0": {"label": "positive", "score": 0.93},
    "alice/conll-ner@1.0.0": {
        "entities": [{"text": "Angela Merkel", "type": "PER", "start": 0, "end": 13,
                      "score": 0.91},
                     {"text": "Paris", "type": "LOC", "start": 22, "end": 27, "score": 0.88}],
        "tags": ["B-PER", "I-PER", "O", "B-LOC", "O"]},
}


class Stub(BaseHTTPRequestHandler):
    """hub serve's /v1/predict: known adapters answer, others are refused as hub serve does."""

    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Stub.received.append({"path": self.path, **body})
        answer = ANSWERS.get(body["adapter"])
        if answer is None:
            status, reply = 404, {"error": f"adapter {body['adapter']!r} is not served",
                                  "hint": "start hub serve with --allow-pull"}
        else:
            status, reply = 200, {"adapter": body["adapter"],
                                  "predictions": [{"text": body["inputs"][0], **answer}]}
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def stub_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
