"""A large upload with each installed huggingface_hub client version against the registry
with LFS_UPLOADS on: which path it took (plain Git LFS, or inline for clients that would
send "lfs" files to Xet), how long it took, and whether the registry holds the right base.

    python -m venv /tmp/hf036 && /tmp/hf036/bin/pip install "huggingface_hub==0.36.*" numpy safetensors
    python -m venv /tmp/hf121 && /tmp/hf121/bin/pip install "huggingface_hub==1.21.*" numpy safetensors
    .venv/bin/python benchmarks/bench_client_versions.py --size-mb 200 \\
        --python /tmp/hf036/bin/python --python /tmp/hf121/bin/python --python .venv/bin/python

Each interpreter runs the stock client (hf_xet installed; only HF_ENDPOINT set, which 0.36
needs to read the commit URL back) in a child process: create_repo + upload_folder of a base folder (config.json and one float32
safetensors tensor of --size-mb). The registry runs under gunicorn on SQLite and disk.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_presigned import serve, stop  # noqa: E402

CHILD = """
import json, sys, time
from pathlib import Path
import numpy as np, huggingface_hub
from safetensors.numpy import save_file
url, token, repo, folder, values = sys.argv[1:6]
folder = Path(folder); folder.mkdir()
(folder / "config.json").write_text('{"model_type": "bert"}')
save_file({"w": np.ones(int(values), dtype=np.float32)}, str(folder / "model.safetensors"))
api = huggingface_hub.HfApi(endpoint=url, token=token)
api.create_repo(repo)
start = time.monotonic()
api.upload_folder(folder_path=str(folder), repo_id=repo)
print(json.dumps({"version": huggingface_hub.__version__, "seconds": time.monotonic() - start}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", required=True,
                        help="an interpreter with huggingface_hub, numpy and safetensors")
    parser.add_argument("--size-mb", type=int, default=200)
    args = parser.parse_args()
    from hubcli.format.base_identity import safetensors_content_hash
    from registry_server import create_app
    from registry_server.db import db
    from registry_server.models import LfsUpload
    from registry_server.services import accounts, repos
    from sqlalchemy import select

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        instance = tmp / "instance"
        settings = {"DATABASE_URL": f"sqlite:///{tmp / 'registry.db'}", "LFS_UPLOADS": 1}
        app = create_app({"INSTANCE_PATH": str(instance), "AUTO_MIGRATE": True, **settings})
        with db.session_scope(app) as session:
            token = accounts.create_token(session, accounts.create_user(session, "bench"))[1]
        proc, port = serve(instance, settings, 2)
        url = f"http://127.0.0.1:{port}"
        print(f"{args.size_mb} MB base, upload_folder, LFS_UPLOADS on, gunicorn 2 workers; "
              f"load average before: {os.getloadavg()[0]:.1f}")
        try:
            for i, python in enumerate(args.python):
                folder, repo = tmp / f"base-{i}", f"bench/base-{i}"
                start = time.monotonic()
                out = subprocess.run([python, "-c", CHILD, url, token, repo, str(folder),
                                      str(args.size_mb * 250_000)], capture_output=True,
                                     text=True,
                                     env={**os.environ, "HF_ENDPOINT": url,
                                          "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
                if out.returncode != 0:
                    print(f"{python}: FAILED after {time.monotonic() - start:.1f} s: "
                          f"{out.stderr.strip().splitlines()[-1]}")
                    continue
                result = json.loads(out.stdout.strip().splitlines()[-1])
                digest = safetensors_content_hash([folder / "model.safetensors"])
                hosted = requests.get(f"{url}/api/v1/bases/{digest}").json()
                with db.session_scope(app) as session:
                    adapter = repos.find_adapter(session, "bench", f"base-{i}")
                    via_lfs = session.scalar(select(LfsUpload.oid).where(
                        LfsUpload.adapter_id == adapter.id)) is not None
                print(f"huggingface_hub {result['version']:8s} {result['seconds']:6.1f} s  "
                      f"{'plain LFS' if via_lfs else 'inline   '}  "
                      f"hosted: {hosted.get('id') == repo}")
        finally:
            stop(proc)
            db.engine(app).dispose()


if __name__ == "__main__":
    main()
