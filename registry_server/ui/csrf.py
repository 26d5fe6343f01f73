"""CSRF protection for the UI's forms: a random token per browser session, sent back in a
hidden field of every POST form and compared in constant time.

SameSite=Lax cookies already stop most cross-site POSTs; the token also covers older browsers
and same-site attackers (another app on a sibling subdomain).
"""

from __future__ import annotations

import hmac
import secrets

from flask import request, session

from hubcli.format import error_codes as codes
from registry_server.errors import ApiError

FIELD = "csrf_token"
_KEY = "csrf"


class CsrfRejected(ApiError):
    status = 400
    code = codes.CSRF_REJECTED


def token() -> str:
    """This session's CSRF token (created on first use); templates put it in every form."""
    if _KEY not in session:
        session[_KEY] = secrets.token_urlsafe(32)
    return session[_KEY]


def protect() -> None:
    """Check the token of a state-changing request.

    Raises:
        CsrfRejected: missing, or not this session's token.
    """
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    expected, sent = session.get(_KEY), request.form.get(FIELD, "")
    if not expected or not hmac.compare_digest(expected.encode(), sent.encode()):
        raise CsrfRejected("this form has expired or did not come from this site",
                           hint="reload the page and submit the form again")

