"""Registry configuration: defaults, then the instance folder's `config.py`, then
`HUB_REGISTRY_*` environment variables, then `test_config` (highest).

Every key below can be set as an environment variable with the `HUB_REGISTRY_` prefix, e.g.
`HUB_REGISTRY_DATABASE_URL=postgresql+psycopg://...`. Values from the environment are parsed
with the type of the default (int, bool: 1/true/yes/on).
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path
from typing import Any

ENV_PREFIX = "HUB_REGISTRY_"
MiB = 1 << 20

DEFAULTS: dict[str, Any] = {
    # SQLAlchemy URL; empty means SQLite in the instance folder.
    "DATABASE_URL": "",
    # Blob storage: a local folder path, or s3://bucket/prefix. Empty means <instance>/blobs.
    "STORAGE": "",
    # S3-compatible endpoint (e.g. MinIO); empty means boto3's default (AWS_* variables).
    "S3_ENDPOINT_URL": "",
    # With S3 storage, file downloads are answered 302 to a presigned URL valid this many
    # seconds (the bytes go from the store to the client, not through the registry); 0: the
    # registry serves them itself. Disk storage is always served directly.
    "DOWNLOAD_URL_TTL": 300,
    # Run pending migrations when the app starts. Empty means: only for SQLite.
    "AUTO_MIGRATE": "",
    # Limits on what one commit may hold.
    "MAX_FILE_SIZE": 256 * MiB,
    "MAX_BUNDLE_SIZE": 512 * MiB,
    "MAX_COMMIT_FILES": 16,
    # Answer "lfs" (Git LFS batch path) in preupload for files at least this large, for
    # clients that sent `X-Hub-Lfs: 1`, or, when LFS_UPLOADS is on, for every client but
    # huggingface_hub >= 1.20, which sends "lfs" files to Xet (not spoken here) and so is
    # answered "regular" (inline).
    "LFS_UPLOADS": False,
    "LFS_MIN_SIZE": 1 * MiB,
    # Lifetime of a signed LFS upload URL, seconds.
    "LFS_URL_TTL": 3600,
    # Base URL written into commit and LFS URLs; empty means the request's own host URL.
    "PUBLIC_URL": "",
    # HMAC key for signed LFS upload URLs; empty means a random key kept in the instance folder.
    "SECRET_KEY": "",
    # Download counts are kept in memory and written every this many seconds (0: at once).
    "DOWNLOAD_FLUSH_SECONDS": 2,
    # Page size limits of list endpoints.
    "PAGE_SIZE": 20,
    "MAX_PAGE_SIZE": 100,
    # Web sign-in throttle: after this many wrong passwords for one account from one client
    # address within the window (seconds), that pair is refused (429) until the window passes.
    "LOGIN_MAX_FAILURES": 10,
    "LOGIN_FAILURE_WINDOW": 600,
    # Lifetime of a challenge that proves possession of a signing key, seconds.
    "KEY_CHALLENGE_TTL": 300,
    # A `hub serve --allow-pull` instance the adapter page's "Try it" box sends texts to
    # (empty: no box), and how long to wait for its answer, seconds.
    "INFERENCE_URL": "",
    "INFERENCE_TIMEOUT": 20,
}


def _parse(raw: str, default: Any) -> Any:
    if isinstance(default, bool):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(raw)
    return raw


def from_environment(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The HUB_REGISTRY_* variables that name a known key, parsed to the default's type.

    Raises:
        ValueError: a numeric variable that is not an integer (names the variable).
    """
    environ = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for key, default in DEFAULTS.items():
        raw = environ.get(ENV_PREFIX + key)
        if raw is None:
            continue
        try:
            out[key] = _parse(raw, default)
        except ValueError:
            raise ValueError(f"{ENV_PREFIX}{key}={raw!r} is not an integer") from None
    return out


def instance_path() -> Path:
    """The instance folder: $HUB_REGISTRY_INSTANCE_PATH, else ~/.local/share/hub-registry."""
    env = os.environ.get(ENV_PREFIX + "INSTANCE_PATH")
    return Path(env) if env else Path.home() / ".local" / "share" / "hub-registry"


def finalize(config: dict[str, Any], instance: Path) -> None:
    """Fill the defaults that depend on the instance folder (database, storage, secret)."""
    if not config["DATABASE_URL"]:
        config["DATABASE_URL"] = f"sqlite:///{instance / 'registry.db'}"
    if not config["STORAGE"]:
        config["STORAGE"] = str(instance / "blobs")
    if config["AUTO_MIGRATE"] in ("", None):
        config["AUTO_MIGRATE"] = config["DATABASE_URL"].startswith("sqlite")
    elif isinstance(config["AUTO_MIGRATE"], str):
        config["AUTO_MIGRATE"] = _parse(config["AUTO_MIGRATE"], False)
    if not config["SECRET_KEY"]:
        config["SECRET_KEY"] = _instance_secret(instance)


def _instance_secret(instance: Path) -> str:
    """A random secret kept in the instance folder, so every worker process shares it."""
    path = instance / "secret_key"
    if not path.exists():
        instance.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=instance, prefix=".secret_key.")
        try:
            os.write(fd, (secrets.token_hex(32) + "\n").encode())
            os.close(fd)
            # link() fails if the file exists: when workers start together, the first one wins.
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    return path.read_text().strip()
