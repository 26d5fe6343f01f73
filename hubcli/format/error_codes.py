"""The error codes the registry sends (`X-Error-Code`, and "code" in the JSON body) and the
client reads: one list, so neither side spells a code the other does not know.

`tests/test_error_codes.py` checks that the registry sends only these, each of them somewhere,
and that the client decides a hint for every one (`hubcli.remote.errors.CODE_HINTS`).
"""

from __future__ import annotations

BAD_REQUEST = "BadRequest"
PAYLOAD_TOO_LARGE = "PayloadTooLarge"
UNAUTHORIZED = "Unauthorized"
FORBIDDEN = "Forbidden"
REPO_NOT_FOUND = "RepoNotFound"
REVISION_NOT_FOUND = "RevisionNotFound"
ENTRY_NOT_FOUND = "EntryNotFound"
NOT_FOUND = "NotFound"
CONFLICT = "Conflict"
KEY_PROOF_REJECTED = "KeyProofRejected"
INVALID_BUNDLE = "InvalidBundle"
INVALID_SIGNATURE = "InvalidSignature"
METHOD_NOT_ALLOWED = "MethodNotAllowed"
RANGE_NOT_SATISFIABLE = "RangeNotSatisfiable"
INSUFFICIENT_STORAGE = "InsufficientStorage"
STORAGE_UNAVAILABLE = "StorageUnavailable"
INTERNAL_ERROR = "InternalError"
XET_UNSUPPORTED = "XetUnsupported"
# A Hub feature this registry does not have (git tags and branches: versions are the tags;
# gated access): refused, never answered 200 and ignored.
UNSUPPORTED = "Unsupported"
CSRF_REJECTED = "CsrfRejected"  # web forms only; the client never posts one

# every constant above, so that adding a code is one line
ERROR_CODES = frozenset(value for name, value in dict(globals()).items()
                        if name.isupper() and isinstance(value, str))
