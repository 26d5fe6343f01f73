"""A registry served from a thread of this process on localhost, over SQLite and a blob folder:
`hub quickstart` runs the whole loop against one, and the client tests use it as their server.

Needs the server dependencies: pip install 'adapter-hub[server]'.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from hubcli.errors import UsageError


class LocalRegistry:
    """`with LocalRegistry(folder) as reg:` serves on `reg.url` until the block ends."""

    def __init__(self, folder: Path, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.folder = Path(folder)
        self.host = host
        self.port = port
        self.app = None
        self._server = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._server.server_port}"

    def start(self) -> str:
        """Create the database if needed and serve; returns the URL.

        Raises:
            UsageError: the server dependencies are not installed.
        """
        try:
            from werkzeug.serving import make_server

            from registry_server import create_app
        except ImportError as e:
            raise UsageError(f"the registry server cannot be loaded ({e})",
                             hint="pip install 'adapter-hub[server]'") from None
        # Request lines would drown the caller's output; errors still show.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self.app = create_app({
            "INSTANCE_PATH": str(self.folder), "AUTO_MIGRATE": True,
            "DATABASE_URL": f"sqlite:///{self.folder / 'registry.db'}",
            "STORAGE": str(self.folder / "blobs")})
        self._server = make_server(self.host, self.port, self.app, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="local-registry")
        self._thread.start()
        return self.url

    def create_user(self, name: str) -> str:
        """Create a user (with a write token); returns the token.

        Raises:
            RegistryError: bad or taken name.
        """
        from registry_server.db import db
        from registry_server.services import accounts

        with db.session_scope(self.app) as session:
            user = accounts.create_user(session, name)
            return accounts.create_token(session, user, name="quickstart", scope="write")[1]

    def stop(self) -> None:
        if self._server is None:
            return
        from registry_server.db import db
        from registry_server.services import downloads

        self._server.shutdown()
        self._thread.join()
        self.app.extensions[downloads.EXTENSION].close()
        db.engine(self.app).dispose()
        self._server = None

    def __enter__(self) -> LocalRegistry:
        self.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.stop()
