"""The adapter registry server: a Flask app speaking the Hugging Face Hub protocol (subset) and
a native JSON API, over SQLAlchemy and content-addressed blob storage.

Never imports torch or transformers (only torch-free hubcli modules).

    app = create_app()                       # instance folder + HUB_REGISTRY_* variables
    app = create_app({"DATABASE_URL": ...})  # tests: explicit settings win
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Flask

from registry_server import config as config_mod


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    """Build the app. Settings: defaults < instance `config.py` < HUB_REGISTRY_* < test_config.

    Raises:
        ValueError: a malformed setting (e.g. a non-integer size limit).
    """
    instance = Path((test_config or {}).get("INSTANCE_PATH") or config_mod.instance_path())
    app = Flask(__name__, instance_path=str(instance.resolve()), instance_relative_config=True)
    app.config.update(config_mod.DEFAULTS)
    app.config.from_pyfile("config.py", silent=True)
    app.config.update(config_mod.from_environment())
    app.config.update(test_config or {})
    config_mod.finalize(app.config, Path(app.instance_path))
    app.json.sort_keys = False
    from registry_server import httputil
    app.url_map.converters["int"] = httputil.IdConverter
    app.before_request(httputil.refuse_nul)

    from registry_server import api, blobhttp, errors, hfapi, hfrepos, lfs
    from registry_server.db import db
    from registry_server.services import downloads

    db.init_app(app)
    app.extensions[downloads.EXTENSION] = downloads.DownloadCounter(
        db.factory(app), app.config["DOWNLOAD_FLUSH_SECONDS"])
    blobhttp.init_app(app)
    errors.init_app(app)
    app.register_blueprint(api.bp)
    app.register_blueprint(lfs.bp)
    app.register_blueprint(hfapi.bp)
    app.register_blueprint(hfrepos.bp)
    from registry_server import ui
    ui.init_app(app)
    if app.config["AUTO_MIGRATE"]:
        _migrate(app)
    from registry_server import staging
    # Left by pushes that died with their process; `hub-registry gc` starts the app too.
    staging.clean_stale(staging.root(app))
    _warm_up()
    return app


def _migrate(app: Flask) -> None:
    from registry_server import migrate
    from registry_server.db import db

    engine = db.engine(app)
    migrate.upgrade(engine, lock_file=Path(app.instance_path) / "migrate.lock")
    # Forked workers (gunicorn --preload) must not inherit the pool's connections.
    engine.dispose()


def _warm_up() -> None:
    """Import the signature verifier now (about a second) rather than in the first push."""
    from hubcli.signing import upstream  # noqa: F401
