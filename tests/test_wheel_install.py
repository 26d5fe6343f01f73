"""The project as a user of a published package gets it: build the wheel, install it (not editable)
into a fresh venv, and run `hub train`, `hub verify` and `registry_server.create_app()` from there.

Catches what an editable install hides: package data that is not packaged (the manifest schema,
templates, samples) and modules that reach outside the package. The fresh venv sees this
environment's third-party packages through a .pth file (no download, no reinstall of torch), but
not the source tree: every `hubcli`/`registry_server` import must resolve inside the venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.wheel

ROOT = Path(__file__).resolve().parent.parent


def _sh(*args, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> Path:
    """A venv holding the project's wheel, built from a copy of the tracked source tree."""
    work = tmp_path_factory.mktemp("wheel")
    files = _sh("git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", cwd=ROOT)
    src = work / "src"
    for name in filter(None, files.stdout.split("\0")):
        if (ROOT / name).is_file():  # a tracked file deleted in the work tree is not copied
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes((ROOT / name).read_bytes())
    _sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
        "--no-index", "-w", work / "dist", src, cwd=work)
    (wheel,) = (work / "dist").glob("adapter_hub-*.whl")

    venv = work / "venv"
    _sh(sys.executable, "-m", "venv", "--without-pip", venv, cwd=work)
    site = Path(_sh(venv / "bin" / "python", "-c",
                    "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=work).stdout.strip())
    # Third-party packages from this environment; a plain path line does not run its .pth
    # files, so the editable install's import hook never reaches the fresh venv.
    (site / "outer-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _sh(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q",
        "--no-deps", "--no-index", wheel, cwd=work)
    return venv


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HUB_HOME=str(home), HF_HUB_OFFLINE="1")
    return env


def test_installed_wheel_trains_verifies_and_serves(fresh_venv, tiny_base_dir, tmp_path):
    python, hub = fresh_venv / "bin" / "python", fresh_venv / "bin" / "hub"
    env = _env(tmp_path / "home")
    where = _sh(python, "-c", "import hubcli, registry_server; "
                "print(hubcli.__file__); print(registry_server.__file__)", cwd=tmp_path, env=env)
    assert all(line.startswith(str(fresh_venv)) for line in where.stdout.split()), where.stdout

    samples = _sh(python, "-c", "from hubcli.data import sample_dataset; "
                  "print(*sample_dataset(), sep='\\n')", cwd=tmp_path, env=env)
    train, dev = samples.stdout.split()
    out = tmp_path / "sst-adapter"
    trained = _sh(hub, "train", "--base", tiny_base_dir, "--train", train, "--validation", dev,
                  "--out", out, "--epochs", "1", "--bottleneck", "8", "--max-length", "32",
                  "--quiet", "--json", cwd=tmp_path, env=env)
    assert json.loads(trained.stdout)["parameters"]["adapters"] == 2 * 2 * (2 * 8 * 32 + 32 + 8)
    _sh(hub, "keygen", "--name", "alice", cwd=tmp_path, env=env)
    _sh(hub, "bundle", out, cwd=tmp_path, env=env)
    _sh(hub, "sign", out, cwd=tmp_path, env=env)
    verified = _sh(hub, "verify", out, "--json", cwd=tmp_path, env=env)
    assert json.loads(verified.stdout)["signer"] == "alice"

    # create_app imports the web UI, which reads the manifest schema's enums (package data).
    served = _sh(python, "-c", (
        "import sys, registry_server; "
        "app = registry_server.create_app({'INSTANCE_PATH': sys.argv[1], 'SECRET_KEY': 'x', "
        "'DATABASE_URL': 'sqlite:///' + sys.argv[1] + '/db.sqlite'}); "
        "print(app.test_client().get('/').status_code)"), tmp_path / "instance",
        cwd=tmp_path, env=env)
    assert served.stdout.split()[-1] == "200"
