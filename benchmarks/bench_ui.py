"""Web UI speed over 10,000 adapters: server time of search pages and adapter pages.

    .venv/bin/python benchmarks/bench_ui.py [--adapters 10000] [--repeat 40]
        [--database-url postgresql+psycopg://postgres@127.0.0.1:5432/test]

Seeds a temp SQLite database (or a fresh schema of the given PostgreSQL) by bulk-inserting
rows (users, adapters with one or two versions, files, tags, model cards of realistic size),
then times requests through the Flask test client: the whole request (routing, queries,
templates), without network. Prints median and p95 per scenario.

Targets: search < 100 ms, adapter page < 50 ms. For comparison it also times the service
layer's search (`services.search`, a LIKE scan) against the UI's full-text search on the same
text queries.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

TOPICS = ["sentiment", "movie", "reviews", "news", "topic", "entities", "medical", "legal",
          "tweets", "emotion", "spam", "toxicity", "finance", "product", "intent", "support",
          "biomedical", "chemistry", "sarcasm", "language", "stance", "hate", "question",
          "paraphrase", "similarity", "restaurant", "hotel", "airline", "climate", "sports"]
TAGS = ["english", "german", "french", "multilingual", "social-media", "reviews", "clinical",
        "benchmark", "glue", "superglue", "distilled", "small", "experimental", "production"]
KINDS = [("classification", "sequence_classification", ["negative", "positive"]),
         ("tagging", "token_classification", ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]),
         ("regression", "regression", []),
         ("qa", "question_answering", [])]
BASES = [(f"bert-variant-{i}", "sha256:" + f"{i:02x}" * 32) for i in range(20)]


def seed(app, count: int, rng: random.Random) -> None:
    """Bulk-insert `count` adapters (a fifth of them with a second version) in one transaction."""
    from sqlalchemy import insert, text, update

    from factories import default_manifest
    from hubcli.bundle.card import render_model_card
    from registry_server.db import db
    from registry_server.models import (Adapter, AdapterTag, Blob, Namespace, PublicKey, User,
                                        Version, VersionFile, utcnow)
    from registry_server.services.repos import SEARCH_CARD_CHARS

    template = default_manifest()
    template["parameters"] = {"trainable": 2610, "adapters": 1168, "layernorm": 320,
                              "head": 1122, "base": 1_000_000, "share": 0.00261}
    template["files"] = [{"path": "adapter.safetensors", "sha256": "0" * 64, "size": 13_000}]
    card = render_model_card(template)  # about 2.6 kB, like a real one
    now = utcnow()
    users = [f"user{i}" for i in range(200)]
    blobs = [{"sha256": f"{i:064x}", "size": 13_000 + i, "git_oid": f"{i:040x}",
              "created_at": now} for i in range(4)]
    adapters, versions, files, tags = [], [], [], []
    version_id = 0
    for i in range(count):
        task, head, labels = KINDS[i % len(KINDS)]
        base_name, base_hash = BASES[rng.randrange(len(BASES))]
        words = rng.sample(TOPICS, 3)
        name = f"{words[0]}-{task}-{i}"
        description = f"{' '.join(words).capitalize()} {task} adapter number {i}."
        adapter_tags = sorted(rng.sample(TAGS, rng.randint(1, 3)))
        adapter_card = card.replace("tiny-adapter", name)
        manifest = {**template, "name": name, "description": description, "tags": adapter_tags,
                    "task": task, "head": {"type": head, "num_outputs": max(len(labels), 1),
                                           "labels": labels},
                    "base_model": {**template["base_model"], "name": base_name,
                                   "content_hash": base_hash},
                    "metrics": {"primary": "accuracy", "validation": [
                        {"epoch": e, "train_loss": 1 / e, "loss": 1.1 / e,
                         "accuracy": 0.5 + e * rng.random() / 10} for e in range(1, 6)]}}
        adapters.append({
            "id": i + 1, "namespace_id": i % len(users) + 1, "name": name,
            "private": i % 50 == 0, "created_at": now, "updated_at": now,
            "downloads": rng.randrange(100_000), "description": description, "task": task,
            "head_type": head, "base_model_name": base_name, "base_model_hash": base_hash,
            "search_text": "\n".join([name, description, " ".join(adapter_tags),
                                      adapter_card[:SEARCH_CARD_CHARS]]).lower()})
        tags += [{"adapter_id": i + 1, "tag": t} for t in adapter_tags]
        for number in (["1.0.0", "1.1.0"] if i % 5 == 0 else ["1.0.0"]):
            version_id += 1
            versions.append({
                "id": version_id, "adapter_id": i + 1, "version": number,
                "commit_sha": uuid.uuid4().hex + "0" * 8, "tree_digest": "0" * 64,
                "summary": "", "card": adapter_card, "manifest": {**manifest, "version": number},
                "task": task, "head_type": head, "base_model_name": base_name,
                "base_model_hash": base_hash,
                # Each publisher's own key (a key belongs to one account).
                "signer_key_id": f"sha256:{i % len(users) + 1:064x}",
                "pushed_by_id": i % len(users) + 1, "created_at": now, "downloads": 0})
            files += [{"version_id": version_id, "path": path, "blob_sha256": blobs[k]["sha256"]}
                      for k, path in enumerate(("README.md", "adapter.safetensors",
                                                "manifest.json", "model.sig"))]
    with db.session_scope(app) as session:
        session.execute(insert(Namespace), [{"id": k + 1, "name": n, "kind": "user",
                                             "created_at": now} for k, n in enumerate(users)])
        session.execute(insert(User), [{"id": k + 1, "namespace_id": k + 1, "is_admin": False,
                                        "created_at": now} for k in range(len(users))])
        session.execute(insert(PublicKey), [{"user_id": k + 1, "key_id": f"sha256:{k + 1:064x}",
                                             "name": "", "pem": "", "created_at": now}
                                            for k in range(0, len(users), 2)])
        session.execute(insert(Blob), blobs)
        session.execute(insert(Adapter), adapters)
        session.execute(insert(Version), versions)
        session.execute(insert(VersionFile), files)
        session.execute(insert(AdapterTag), tags)
        # `main` is the newest version of each adapter.
        latest = {v["adapter_id"]: v["id"] for v in versions}
        session.execute(update(Adapter), [{"id": a, "latest_version_id": v}
                                          for a, v in latest.items()])
        session.commit()
        if session.get_bind().dialect.name == "postgresql":
            # What autovacuum does shortly after a bulk load; SQLite gets no statistics.
            session.execute(text("ANALYZE"))
            session.commit()


def timed(client, url: str, repeat: int) -> list[float]:
    """Milliseconds per request, after two warm-up requests."""
    for _ in range(2):
        assert client.get(url).status_code == 200, url
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        response = client.get(url)
        out.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, url
    return out


def stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def service_search_ms(app, text: str, repeat: int) -> tuple[float, float]:
    """The service layer's search vs the UI's, on the same text, in milliseconds (median)."""
    from registry_server.db import db
    from registry_server.services import search
    from registry_server.ui import queries

    results = []
    for run in (lambda s: search.search(s, None, search.SearchQuery(text=text)),
                lambda s: queries.search(s, None, queries.UiQuery(text=text))):
        samples = []
        with app.app_context(), db.session_scope(app) as session:
            for _ in range(repeat):
                start = time.perf_counter()
                run(session)
                samples.append((time.perf_counter() - start) * 1000)
        results.append(statistics.median(samples))
    return results[0], results[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapters", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()
    rng = random.Random(0)

    from registry_server import create_app

    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{tmp}/registry.db"
        schema = None
        if url.startswith("postgresql"):
            schema = _pg_schema(url)
            url = f"{url}?options=-csearch_path%3D{schema}"
        app = create_app({"INSTANCE_PATH": f"{tmp}/instance", "DATABASE_URL": url,
                          "SECRET_KEY": "bench", "AUTO_MIGRATE": True})
        start = time.perf_counter()
        seed(app, args.adapters, rng)
        print(f"seeded {args.adapters} adapters in {time.perf_counter() - start:.1f} s "
              f"({url.split(':')[0]}); load average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} CPUs")
        client = app.test_client()
        hash_of_base = BASES[3][1]
        search_urls = ["/search", "/search?q=sentiment", "/search?q=sentiment&sort=downloads",
                       "/search?q=movie+reviews",
                       "/search?q=sent", "/search?q=sentiment-classification-40",
                       "/search?task=tagging&sort=recent",
                       "/search?q=news&tag=english&head_type=sequence_classification",
                       f"/search?base_hash={hash_of_base}", "/search?signed=1",
                       "/search?q=adapter&page=200", "/search?q=nomatchword", "/"]
        print(f"\n{'page':<66} {'median ms':>9} {'p95 ms':>8}")
        for page in search_urls:
            median, p95 = stats(timed(client, page, args.repeat))
            print(f"{page:<66} {median:9.1f} {p95:8.1f}")
        names = [(f"user{i % 200}", a) for i, a in _adapter_names(app, rng, 200)]
        cold = []
        for ns, name in names:  # each page once: the card's Markdown is rendered fresh
            start = time.perf_counter()
            assert client.get(f"/{ns}/{name}").status_code == 200
            cold.append((time.perf_counter() - start) * 1000)
        median, p95 = stats(cold)
        print(f"{'adapter page, 200 different adapters (first view)':<66} {median:9.1f} {p95:8.1f}")
        median, p95 = stats(timed(client, f"/{names[0][0]}/{names[0][1]}", args.repeat))
        print(f"{'adapter page, repeated':<66} {median:9.1f} {p95:8.1f}")
        print("\nservice-level text search, median ms: services.search (LIKE) vs UI (full text)")
        for text in ("sentiment", "movie reviews", "nomatchword"):
            like, fts = service_search_ms(app, text, max(5, args.repeat // 4))
            print(f"  {text!r:<18} {like:8.1f} {fts:8.1f}")
        _dispose(app)
        if schema:
            _drop_schema(args.database_url, schema)


def _adapter_names(app, rng: random.Random, count: int) -> list[tuple[int, str]]:
    from sqlalchemy import select

    from registry_server.db import db
    from registry_server.models import Adapter

    with db.session_scope(app) as session:
        rows = session.execute(select(Adapter.id, Adapter.name)
                               .where(Adapter.private.is_(False))).all()
    return [(adapter_id - 1, name) for adapter_id, name in rng.sample(rows, count)]


def _pg_schema(url: str) -> str:
    from sqlalchemy import create_engine, text

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with create_engine(url).begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    return schema


def _drop_schema(url: str, schema: str) -> None:
    from sqlalchemy import create_engine, text

    with create_engine(url).begin() as conn:
        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))


def _dispose(app) -> None:
    from registry_server.db import db

    db.engine(app).dispose()


if __name__ == "__main__":
    main()
