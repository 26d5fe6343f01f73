"""Which registry, as whom: `hub login` stores a token per registry URL in
`$HUB_HOME/tokens.json` (owner-only, written atomically) and remembers the registry as the
default. Precedence: command-line flag > HUB_ENDPOINT / HUB_TOKEN > what `hub login` stored.

The Hugging Face Hub (`--to hf`, `--from hf`) uses huggingface_hub's own settings: HF_ENDPOINT,
and HF_TOKEN or the token `hf auth login` stored.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hubcli.errors import UsageError
from hubcli.fsutil import atomic_write_text
from hubcli.remote.client import HF, REGISTRY, Remote, whoami
from hubcli.settings import DEFAULT_ENDPOINT, TOKENS_FILE, home_path, resolve, save_config

REGISTRY_KEY = "registry"  # config.json: the registry `hub login` logged in to last


def tokens_path() -> Path:
    return home_path(TOKENS_FILE)


def _tokens() -> dict[str, str]:
    try:
        data = json.loads(tokens_path().read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except ValueError:
        raise UsageError(f"{tokens_path()}: not valid JSON",
                         hint="delete the file and run `hub login` again") from None
    return data if isinstance(data, dict) else {}


def _save_tokens(tokens: dict[str, str]) -> None:
    atomic_write_text(tokens_path(), json.dumps(tokens, indent=2) + "\n", mode=0o600)


def normalise_endpoint(url: str) -> str:
    """'127.0.0.1:8000/' -> 'http://127.0.0.1:8000'.

    Raises:
        UsageError: not an http(s) URL.
    """
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"registry URL {url!r} is not http(s)",
                         hint="e.g. --registry http://127.0.0.1:8000")
    return url


def registry_endpoint(flag: str | None = None) -> str:
    return normalise_endpoint(resolve(flag, "HUB_ENDPOINT", REGISTRY_KEY, DEFAULT_ENDPOINT))


def registry_remote(endpoint: str | None = None, token: str | None = None, *,
                    progress: bool = True) -> Remote:
    """Our registry: URL from flag > HUB_ENDPOINT > `hub login`; token from flag > HUB_TOKEN
    > the token `hub login` stored for that URL (None when there is none)."""
    url = registry_endpoint(endpoint)
    token = token or os.environ.get("HUB_TOKEN") or _tokens().get(url)
    return Remote(url, token, REGISTRY, progress)


def hf_remote(token: str | None = None, *, progress: bool = True) -> Remote:
    """The Hugging Face Hub (HF_ENDPOINT if set): token from flag > huggingface_hub's own
    (HF_TOKEN, or `hf auth login`)."""
    from huggingface_hub import constants, get_token

    # HF_ENDPOINT is read here too, not only when huggingface_hub was imported
    endpoint = os.environ.get("HF_ENDPOINT") or constants.ENDPOINT
    return Remote(endpoint.rstrip("/"), token or get_token(), HF, progress)


def login(endpoint: str | None, token: str, *, make_default: bool = True) -> dict[str, Any]:
    """Check `token` with the registry (whoami), then store it for that registry and (with
    `make_default`) make the registry the default. Returns the whoami answer plus "registry".

    Raises:
        AuthError: the registry refused the token. RegistryError: unreachable.
    """
    url = registry_endpoint(endpoint)
    token = token.strip()
    if not token:
        raise UsageError("the token is empty", hint="paste the token `hub-registry "
                                                    "create-user` or the web UI gave you")
    who = whoami(Remote(url, token, REGISTRY))
    _save_tokens({**_tokens(), url: token})
    if make_default:
        save_config({REGISTRY_KEY: url})
    return {"registry": url, **who}


def logout(endpoint: str | None = None) -> str | None:
    """Forget the token stored for the registry; returns its URL, or None if none was stored."""
    url = registry_endpoint(endpoint)
    tokens = _tokens()
    if tokens.pop(url, None) is None:
        return None
    _save_tokens(tokens)
    return url
