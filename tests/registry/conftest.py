"""Fixtures for the registry server tests: a real server on a free localhost port, over SQLite
and PostgreSQL, with users, tokens, signing keys and signed bundles."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from sqlalchemy import create_engine, text
from werkzeug.serving import make_server

from factories import make_adapter_dir
from hubcli.bundle import make_bundle
from hubcli.signing.sign import sign_bundle
from registry_server import create_app
from registry_server.db import db
from registry_server.services import accounts

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
HEADER = {"key": "header", "value": {"summary": "push", "description": ""}}


@dataclass(frozen=True)
class SigningKey:
    private_path: Path
    public_pem: str


def new_signing_key(folder: Path) -> SigningKey:
    key = ec.generate_private_key(ec.SECP256R1())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"key-{uuid.uuid4().hex[:8]}.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    return SigningKey(path, pem.decode())


@pytest.fixture(scope="session")
def signing_key(tmp_path_factory) -> SigningKey:
    return new_signing_key(tmp_path_factory.mktemp("keys"))


def signed_bundle(path: Path, key: SigningKey, *, name: str = "sst2", version: str = "1.0.0",
                  seed: int = 0, **overrides) -> Path:
    """A complete, signed bundle folder (manifest, weights, README, model.sig)."""
    make_adapter_dir(path, name=name, version=version, seed=seed, **overrides)
    make_bundle(path)
    sign_bundle(path, key.private_path)
    return path


def file_op(path: str, data: bytes) -> dict:
    return {"key": "file", "value": {"path": path, "encoding": "base64",
                                     "content": base64.b64encode(data).decode()}}


def bundle_ops(folder: Path) -> list[dict]:
    return [file_op(p.name, p.read_bytes()) for p in sorted(folder.iterdir())]


def post_commit(registry, token: str, body: bytes | list[dict], repo: str = "alice/sst2"):
    if isinstance(body, list):
        body = b"".join(json.dumps(line).encode() + b"\n" for line in body)
    return requests.post(f"{registry.url}/api/models/{repo}/commit/main", data=body,
                         headers={"Authorization": f"Bearer {token}",
                                  "Content-Type": "application/x-ndjson"})


def _pg_available() -> bool:
    try:
        with create_engine(PG_URL, connect_args={"connect_timeout": 2}).connect():
            return True
    except Exception:
        return False


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request, tmp_path) -> Iterator[str]:
    """A fresh database: a SQLite file, or a private schema in the test PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry.db'}"
        return
    yield from pg_schema_url()


def pg_schema_url() -> Iterator[str]:
    if not _pg_available():
        pytest.skip(f"PostgreSQL is not reachable at {PG_URL}")
    schema = f"reg_{uuid.uuid4().hex[:12]}"
    engine = create_engine(PG_URL)
    with engine.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        engine.dispose()


class Registry:
    """A running registry and helpers to set up accounts."""

    def __init__(self, app, url: str) -> None:
        self.app = app
        self.url = url

    def session(self):
        return db.session_scope(self.app)

    def user(self, name: str, *, key: SigningKey | None = None, scope: str = "write") -> str:
        """Create a user (with `key` registered); returns a token."""
        with self.session() as session:
            user = accounts.create_user(session, name)
            if key is not None:
                accounts.add_public_key(session, user, key.public_pem)
            return accounts.create_token(session, user, scope=scope)[1]

    def org(self, name: str, *members: str) -> None:
        with self.session() as session:
            accounts.create_org(session, name, members=list(members))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, proc: subprocess.Popen) -> None:
    """Raises: AssertionError: the server process exited. TimeoutError: not up in 60 s."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the server exited"
        try:
            if requests.get(f"{url}/api/v1/health", timeout=5).status_code == 200:
                return
        except requests.RequestException:
            time.sleep(0.2)
    raise TimeoutError("the server did not start")


def start_registry(config: dict) -> tuple[Registry, callable]:
    app = create_app({"AUTO_MIGRATE": True, **config})
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        thread.join()
        db.engine(app).dispose()

    return Registry(app, f"http://127.0.0.1:{server.server_port}"), stop


@pytest.fixture
def registry_config(database_url, tmp_path) -> dict:
    return {"INSTANCE_PATH": str(tmp_path / "instance"), "DATABASE_URL": database_url,
            "SECRET_KEY": "test-secret", "DOWNLOAD_FLUSH_SECONDS": 0}


@pytest.fixture
def registry(registry_config) -> Iterator[Registry]:
    reg, stop = start_registry(registry_config)
    yield reg
    stop()


@pytest.fixture
def hf(monkeypatch, tmp_path):
    """huggingface_hub switched online (the suite's default is offline), caching under tmp."""
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_PROGRESS_BARS", True, raising=False)
    import huggingface_hub

    return huggingface_hub


@pytest.fixture(scope="session")
def s3_endpoint():
    """An S3-compatible server (moto in server mode, real HTTP) on a free localhost port."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_env(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture
def bucket(s3_endpoint, s3_env) -> str:
    name = f"blobs-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=name)
    return name
