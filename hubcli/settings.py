"""Where the hub keeps its files, and how settings are resolved.

Precedence everywhere: command-line flag > environment variable > config file > default.
The config file is `$HUB_HOME/config.json` (HUB_HOME defaults to ~/.config/hub).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

DEFAULT_ENDPOINT = "http://127.0.0.1:8000"

# HUB_HOME's layout, named once. What the user owns (config, tokens, keys, trust store) is an
# error with file and hint when damaged; what the hub rebuilds (records, caches) reads as empty.
CONFIG_FILE = "config.json"            # settings.load_config / save_config
TOKENS_FILE = "tokens.json"            # remote.credentials: registry tokens, owner-only
KEYS_DIR = "keys"                      # signing.keys: your signing key pair
TRUST_FILE = "trusted_keys.json"       # signing.trust: the keys whose signatures you accept
TRAINED_FILE = "trained.json"          # signing.policy: adapters trained here (record)
PULLED_FILE = "pulled.json"            # remote.pull_records: adapters pulled here (record)
KNOWN_BASES_FILE = "bases.json"        # base.ref: bases loaded here, by content hash (record)
VERIFIED_FILE = "verified.json"        # signing.verdicts: signatures verified here (cache)
CACHE_DIR = "cache"                    # base.hashing: base_hashes.json (cache)
HF_CACHE_DIR = "hf-cache"              # remote.pull: huggingface_hub's download cache
ADAPTERS_DIR = "adapters"              # remote.pull: verified pulled adapters
ONNX_CACHE_DIR = "onnx-cache"          # interop.onnx_runtime: adapters exported to ONNX (cache)


def hub_home() -> Path:
    """The hub's config folder (keys, token, trust store, caches)."""
    return Path(os.environ.get("HUB_HOME") or Path.home() / ".config" / "hub")


def home_path(name: str) -> Path:
    """`name` (one of the layout names above) inside HUB_HOME."""
    return hub_home() / name


def config_path() -> Path:
    return home_path(CONFIG_FILE)


def load_config() -> dict[str, Any]:
    """Read the config file; a missing file is an empty config.

    Raises:
        UsageError: the file is not a JSON object (names the file, line and column).
    """
    from hubcli.errors import UsageError

    path = config_path()
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}:{e.lineno}: not valid JSON ({e.msg}, column {e.colno})",
                         hint="fix the file, or delete it to start from defaults") from None
    if not isinstance(config, dict):
        raise UsageError(f"{path}: expected a JSON object", hint="fix or delete the file")
    return config


def save_config(values: dict[str, Any]) -> None:
    """Merge `values` into the config file, atomically, readable by the owner only."""
    from hubcli.fsutil import atomic_write_text

    merged = {**load_config(), **values}
    atomic_write_text(config_path(), json.dumps(merged, indent=2) + "\n", mode=0o600)


def resolve(flag: Any, env: str, key: str, default: Any = None) -> Any:
    """flag > environment variable `env` > config file `key` > default."""
    if flag is not None:
        return flag
    if os.environ.get(env):
        return os.environ[env]
    return load_config().get(key, default)


def cache_dir() -> Path:
    return home_path(CACHE_DIR)
