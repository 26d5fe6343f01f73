"""Schemathesis against both deployments: the dev app on SQLite and gunicorn on PostgreSQL.

Each run generates over 1000 requests from registry_server/openapi.json (fixed seed) and checks
that none is answered >= 500 and that every answer matches the document (status, content type,
body schema). `DELETE /api/v1/tokens/{token_id}` is left out: it would revoke the run's own
token (id 1) and leave every later request a 401 (it is tested in test_registry_api)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Registry, free_port, pg_schema_url, start_registry, wait_until_up

from registry_server import create_app
from registry_server.db import db

pytestmark = pytest.mark.schemathesis
CHECKS = ("not_a_server_error,response_schema_conformance,status_code_conformance,"
          "content_type_conformance")
MIN_CASES = 1000


def _schemathesis(url: str, token: str, tmp_path: Path) -> None:
    command = [str(Path(sys.executable).parent / "schemathesis"), "run",
               f"{url}/api/v1/openapi.json", "--url", url, "-H", f"Authorization: Bearer {token}",
               "-c", CHECKS, "-n", "40", "--seed", "2", "--no-color",
               "--exclude-path", "/api/v1/tokens/{token_id}"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    summary = re.search(r"(\d+) generated, (.*)", run.stdout)
    assert summary, run.stdout[-3000:] + run.stderr[-2000:]
    assert run.returncode == 0, run.stdout[-6000:]
    assert int(summary[1]) >= MIN_CASES, summary[0]
    assert summary[2].strip() == f"{summary[1]} passed", summary[0]


def test_dev_app_on_sqlite(tmp_path):
    registry, stop = start_registry({"INSTANCE_PATH": str(tmp_path / "instance"),
                                     "DATABASE_URL": f"sqlite:///{tmp_path / 'registry.db'}"})
    try:
        _schemathesis(registry.url, registry.user("alice"), tmp_path)
    finally:
        stop()


@pytest.mark.postgres
def test_gunicorn_on_postgresql(tmp_path):
    for database_url in pg_schema_url():
        settings = {"INSTANCE_PATH": str(tmp_path / "instance"), "DATABASE_URL": database_url}
        app = create_app({**settings, "AUTO_MIGRATE": True})
        port = free_port()
        env = {**os.environ, **{f"HUB_REGISTRY_{k}": v for k, v in settings.items()}}
        with open(tmp_path / "gunicorn.log", "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "-w", "4", "--preload",
                                     "-b", f"127.0.0.1:{port}", "registry_server:create_app()"],
                                    env=env, stdout=log, stderr=subprocess.STDOUT)
            url = f"http://127.0.0.1:{port}"
            try:
                wait_until_up(url, proc)
                _schemathesis(url, Registry(app, url).user("alice"), tmp_path)
            finally:
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=30)
                db.engine(app).dispose()
