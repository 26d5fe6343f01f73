"""Seed data for the web UI tests: signed bundles published through the service layer
(`commits.commit`, the same policy an HTTP push goes through), plus web passwords."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from conftest import SigningKey, signed_bundle
from factories import refresh_files
from hubcli.signing.sign import sign_bundle
from registry_server.db import db
from registry_server.services import accounts, commits, repos, versions
from registry_server.storage import get_storage
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
    1.0.0 and 1.1.0, and conll-ner; bob publishes evil-card; acme (alice's org) has a private
    adapter; carol has no password and no adapters."""
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
                                                        "best": {"accuracy": 0.86, "f1": 0.85}})
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
