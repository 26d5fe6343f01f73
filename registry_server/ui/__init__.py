"""The registry's web UI: browse, search and inspect adapters; sign in; manage API tokens and
signing keys. Server-rendered HTML that works without JavaScript (app.js only adds copy
buttons and live search); styles and scripts are served by the app itself.

    from registry_server import ui
    ui.init_app(app)    # in create_app, after the API blueprints

Pages (blueprint "ui"): / (home), /search, /<namespace>, /<namespace>/<name>,
/<namespace>/<name>/versions/<version>, /login, /login/password, /logout, /settings.
"""

from __future__ import annotations

from flask import Flask


def init_app(app: Flask) -> None:
    # Importing the view modules attaches their routes to the blueprint; models adds the
    # UI's tables (credentials, sessions, sign-in failures) to the shared metadata.
    from registry_server.ui import (models, present, queries,  # noqa: F401
                                    views_account, views_adapter, views_browse)
    from registry_server.ui.blueprint import bp, url_with
    from registry_server.ui.signin import UiSessionInterface

    app.session_interface = UiSessionInterface()
    app.extensions[views_browse.SUMMARY] = queries.SummaryCache()
    app.config["SESSION_COOKIE_HTTPONLY"] = True
    app.config["SESSION_COOKIE_SAMESITE"] = "Lax"
    present.init_app(app)
    # A global, not a context variable, so that imported macros (pagination) see it too.
    app.add_template_global(url_with)
    app.register_blueprint(bp)
