"""A read-only Hugging Face Hub for tests: serves folders as model repositories over the
endpoints `snapshot_download` uses (../shared docs: revision info, recursive tree, HEAD/GET
resolve), so the real huggingface_hub client can download from a server the test starts."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

COMMIT = "c0ffee" + "0" * 34  # every repository is one commit


def _files(folder: Path) -> dict[str, Path]:
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*")) if p.is_file()}


def _handler(repos: dict[str, Path]):
    class Hub(BaseHTTPRequestHandler):
        def log_message(self, *_args) -> None:  # quiet
            pass

        def _send(self, status: int, body: bytes = b"", headers: dict | None = None,
                  head: bool = False) -> None:
            self.send_response(status)
            for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
                self.send_header(k, v)
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _missing(self, code: str, head: bool) -> None:
            self._send(404, json.dumps({"error": code}).encode(),
                       {"X-Error-Code": code, "Content-Type": "application/json"}, head)

        def _route(self, head: bool) -> None:
            path = self.path.split("?")[0]
            api = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/(revision|tree)/([^/]+))?", path)
            resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
            repo = (api or resolve).group(1) if (api or resolve) else None
            if repo not in repos:
                return self._missing("RepoNotFound", head)
            files = _files(repos[repo])
            if api and api.group(2) == "tree":
                listing = [{"type": "file", "path": name, "size": p.stat().st_size,
                            "oid": hashlib.sha1(p.read_bytes()).hexdigest()}
                           for name, p in files.items()]
                return self._send(200, json.dumps(listing).encode(),
                                  {"Content-Type": "application/json"}, head)
            if api:
                info = {"id": repo, "sha": COMMIT,
                        "siblings": [{"rfilename": name} for name in files]}
                return self._send(200, json.dumps(info).encode(),
                                  {"Content-Type": "application/json"}, head)
            name = resolve.group(3)
            if name not in files:
                return self._missing("EntryNotFound", head)
            data = files[name].read_bytes()
            self._send(200, data, {"X-Repo-Commit": COMMIT,
                                   "ETag": f'"{hashlib.sha256(data).hexdigest()}"'}, head)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self._route(head=False)

        def do_HEAD(self) -> None:  # noqa: N802
            self._route(head=True)

    return Hub


@contextmanager
def stub_hub(repos: dict[str, Path]) -> Iterator[str]:
    """{repo_id: folder} served on a free localhost port; yields the endpoint URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(repos))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
