"""huggingface_hub's exceptions, turned into the hub's own errors (hubcli.errors) with one-line
messages and a hint. Our registry explains refusals in its JSON body (`error`, `hint`, `code`);
the Hugging Face Hub sends `error` only, so the hint then comes from the status."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from hubcli.errors import (AuthError, ConflictError, HubError, NotFoundError, RegistryError,
                           UsageError)
from hubcli.format import error_codes as codes

if TYPE_CHECKING:
    from hubcli.remote.client import Remote

# The hint for each error code the registry sends (hubcli.format.error_codes), where no
# branch of `_from_answer` decides it from the status first. None: the registry's own hint
# stands (it says what to fix in the request); a text replaces a hint that names server-side
# steps with the command to run.
CODE_HINTS: dict[str, str | None] = {
    codes.INVALID_SIGNATURE: "register your public key with `hub keys upload`, then push again "
                             "(sign with the same key: `hub sign DIR`)",
    **{code: None for code in (
        codes.BAD_REQUEST, codes.PAYLOAD_TOO_LARGE, codes.UNAUTHORIZED, codes.FORBIDDEN,
        codes.REPO_NOT_FOUND, codes.REVISION_NOT_FOUND, codes.ENTRY_NOT_FOUND, codes.NOT_FOUND,
        codes.CONFLICT, codes.KEY_PROOF_REJECTED, codes.INVALID_BUNDLE,
        codes.METHOD_NOT_ALLOWED, codes.RANGE_NOT_SATISFIABLE, codes.INSUFFICIENT_STORAGE,
        codes.STORAGE_UNAVAILABLE, codes.INTERNAL_ERROR, codes.XET_UNSUPPORTED,
        codes.CSRF_REJECTED, codes.UNSUPPORTED)},
}


@contextmanager
def translated(remote: Remote, *, repo_id: str | None = None,
               revision: str | None = None) -> Iterator[None]:
    """Run huggingface_hub calls to `remote`; their exceptions leave as HubErrors."""
    try:
        yield
    except HubError:
        raise
    except Exception as e:  # only those `translate` recognises are converted
        mapped = translate(e, remote, repo_id=repo_id, revision=revision)
        if mapped is None:
            raise
        raise mapped from e


def login_hint(remote: Remote) -> str:
    if remote.kind == "hf":
        return "set HF_TOKEN, or log in with `hf auth login`"
    return f"log in: hub login --registry {remote.endpoint}"


def translate(e: Exception, remote: Remote, *, repo_id: str | None = None,
              revision: str | None = None) -> HubError | None:
    """The HubError for a huggingface_hub (or transport) exception, or None if it is none of
    those: NotFoundError (repository, revision, file), AuthError (401/403), ConflictError
    (409), RegistryError (any other answer, or the endpoint cannot be reached)."""
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub import errors as hf

    endpoint, where = remote.endpoint, dict(repo_id=repo_id, revision=revision)
    # snapshot_download reports offline mode as a cache miss (LocalEntryNotFoundError)
    if isinstance(e, hf.OfflineModeIsEnabled) or (
            isinstance(e, hf.LocalEntryNotFoundError) and constants.is_offline_mode()):
        return RegistryError(f"cannot reach {endpoint}: huggingface_hub is in offline mode",
                             hint="unset HF_HUB_OFFLINE to reach the Hugging Face Hub", **where)
    if isinstance(e, hf.HfHubHTTPError):
        return _from_answer(e, remote, repo_id, revision)
    if isinstance(e, hf.LocalEntryNotFoundError):
        # snapshot_download's way of saying: no connection, and nothing in the cache
        return RegistryError(f"cannot reach {endpoint} and {repo_id} is not in the local cache",
                             hint=_reach_hint(remote), **where)
    if isinstance(e, hf.HFValidationError):
        return UsageError(f"{repo_id!r} is not a valid repository id ({_first_line(str(e))})",
                          hint="use NAMESPACE/NAME, e.g. alice/sst2-adapter")
    if isinstance(e, (httpx2.TransportError, ConnectionError)):
        return RegistryError(f"cannot reach {endpoint} ({type(e).__name__})",
                             hint=_reach_hint(remote), **where)
    return None


def _from_answer(e, remote: Remote, repo_id: str | None, revision: str | None) -> HubError:
    from huggingface_hub import errors as hf

    endpoint = remote.endpoint
    status = e.response.status_code if e.response is not None else None
    message, hint, code = _server_explanation(e)
    where = dict(repo_id=repo_id, revision=revision, status=status)
    if status == 401 and code != codes.REPO_NOT_FOUND:
        # huggingface_hub reports any 401 on a repository URL as RepositoryNotFoundError
        if _sent_token(e):
            return AuthError(f"{endpoint} refused the token: {message}",
                             hint=login_hint(remote).replace("log in:", "log in again:"),
                             **where)
        return AuthError(f"{endpoint} refused: {message}", hint=login_hint(remote), **where)
    if isinstance(e, hf.RevisionNotFoundError):
        return NotFoundError(f"{repo_id} has no version {revision!r} on {endpoint}",
                             hint="see the versions with `hub search` or on the web page; "
                                  "leave out @VERSION for the latest", **where)
    if isinstance(e, hf.RemoteEntryNotFoundError):
        return NotFoundError(f"{endpoint}: {message}", **where)
    if isinstance(e, hf.RepositoryNotFoundError):
        private = " or private" if status == 401 else ""
        return NotFoundError(f"{repo_id} does not exist{private} on {endpoint}",
                             hint="check the name (`hub search`); if it is private, log in "
                                  "first (`hub login`)", **where)
    if status == 403:
        return AuthError(f"{endpoint} refused: {message}", hint=hint, **where)
    if status == 404:
        return NotFoundError(f"{endpoint}: {message}", **where)
    if status == 409:
        return ConflictError(f"{endpoint}: {message}", hint=hint, **where)
    return RegistryError(f"{endpoint} answered {status}: {message}",
                         hint=CODE_HINTS.get(code or "") or hint, **where)


def _server_explanation(e) -> tuple[str, str | None, str | None]:
    """(message, hint, code) from the answer's JSON body, else huggingface_hub's summary."""
    body = {}
    try:
        body = e.response.json()
    except Exception:  # not JSON, or a streamed body that was not read: use the summary
        pass
    code = e.response.headers.get("X-Error-Code") if e.response is not None else None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return _first_line(body["error"]), body.get("hint"), body.get("code") or code
    return _first_line(e.server_message or str(e)), None, code


def _sent_token(e) -> bool:
    request = getattr(e.response, "request", None)
    return request is not None and "authorization" in request.headers


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"


def _reach_hint(remote: Remote) -> str:
    if remote.kind == "hf":
        return "check your network connection and HF_ENDPOINT"
    return (f"is the registry at {remote.endpoint} running? Start one with `hub-registry "
            "serve`, or pass --registry URL")
