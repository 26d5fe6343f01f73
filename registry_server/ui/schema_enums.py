"""The search filters' choices, read from the manifest schema the client validates against,
so a task or head type added there shows up here."""

from __future__ import annotations

import json

from hubcli.format.manifest import SCHEMA_DIR

_PROPERTIES = json.loads((SCHEMA_DIR / "manifest.schema.json").read_text())["properties"]
TASKS: tuple[str, ...] = tuple(_PROPERTIES["task"]["enum"])
HEAD_TYPES: tuple[str, ...] = tuple(_PROPERTIES["head"]["properties"]["type"]["enum"])
