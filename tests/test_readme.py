"""The README's command blocks run as pasted, in order, after the quick start: every ```bash
block but the quick start's install line and the test command (CI runs both anyway), then the
```python blocks, in a fresh folder holding `.venv` and `hubcli/` (links to this checkout) with
its own HUB_HOME and registry instance, on the packaged base.

Two rewrites keep it quick and apart from other runs: `hub train` gets `--epochs 1
--max-length 32`, and the ports 8000 (registry) and 8080 (hub serve) become free ones.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```(bash|python)\n(.*?)^```", re.S | re.M)
SKIPPED = ("pip install", "pytest")  # the quick start's install line; the test command


def blocks(language: str) -> list[str]:
    found = [body for lang, body in BLOCK.findall((ROOT / "README.md").read_text())
             if lang == language]
    return [body for body in found if not any(word in body for word in SKIPPED)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_readme_blocks_are_found():
    bash = blocks("bash")
    assert len(bash) >= 3
    assert all(line.startswith((".venv/bin/", "echo ", "until ", "kill ", "curl "))
               for body in bash for line in body.splitlines() if line.strip()), \
        "a README command that is not run through .venv/bin/ (bare `hub` is not on PATH)"


def test_readme_commands_run_as_pasted(tmp_path):
    port, serve_port = str(free_port()), str(free_port())
    script = "\n".join(blocks("bash"))
    script = script.replace(":8080", f":{serve_port}").replace("--port 8080",
                                                               f"--port {serve_port}")
    script = script.replace("hub train ", "hub train --epochs 1 --max-length 32 ")
    script = script.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    script = script.replace("hub-registry serve", f"hub-registry serve --port {port}")
    work = tmp_path / "clone"
    work.mkdir()
    (work / ".venv").symlink_to(Path(sys.prefix))
    (work / "hubcli").symlink_to(ROOT / "hubcli")
    env = {**os.environ, "HUB_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1",
           "HUB_REGISTRY_INSTANCE_PATH": str(tmp_path / "registry")}
    for name in ("HUB_ENDPOINT", "HUB_TOKEN"):
        env.pop(name, None)
    # set -e stops at the first failing line; the trap stops a registry left running
    wrapped = f"set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}"
    result = subprocess.run(["bash", "-c", wrapped], cwd=work, env=env, capture_output=True,
                            text=True, stdin=subprocess.DEVNULL, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "positive" in result.stdout or "negative" in result.stdout
    assert '"entities"' in result.stdout
    # hub serve's answer to the README's `curl -d` (a body labelled as a form, read as JSON)
    assert '{"adapter":"./ner-adapter","predictions":[{"text":"Angela visited Paris ."' \
        in result.stdout
    for body in blocks("python"):
        run = subprocess.run([str(work / ".venv" / "bin" / "python"), "-c", body], cwd=work,
                             env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
