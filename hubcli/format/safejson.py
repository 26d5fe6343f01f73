"""Parsing JSON that comes from outside (uploads, request bodies, bundle files) with bounded
nesting.

`json.loads` recurses once per nesting level: `[[[[...]]]]` a few thousand deep raises
`RecursionError`, which no caller expects, and even a legal depth of ~900 makes every later
recursive walk (schema validation, copying) fragile. Nothing we read nests deeper than a
handful of levels, so anything over `MAX_DEPTH` is refused as malformed.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64
NUL = "\x00"


def loads(raw: str | bytes, *, max_depth: int = MAX_DEPTH, **kwargs: Any) -> Any:
    """`json.loads(raw, **kwargs)`, refusing documents nested deeper than `max_depth`.

    Raises:
        ValueError: not valid JSON (a `json.JSONDecodeError`), or nested too deeply.
    """
    try:
        value = json.loads(raw, **kwargs)
    except RecursionError:
        raise ValueError(f"nested deeper than {max_depth} levels") from None
    if _depth_exceeds(value, max_depth):
        raise ValueError(f"nested deeper than {max_depth} levels")
    return value


def _depth_exceeds(value: Any, limit: int) -> bool:
    # Iterative: a recursive walk would fail the way json.loads does.
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = (item.values() if isinstance(item, dict)
                    else item if isinstance(item, list) else None)
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def nul_field(value: Any, where: str) -> str | None:
    """The first field of a parsed JSON value (`where`, `where.key`, `where[3]`) holding a NUL
    character, which PostgreSQL cannot store in text; None if there is none."""
    stack = [(value, where)]
    while stack:
        item, name = stack.pop()
        if isinstance(item, str):
            if NUL in item:
                return name
        elif isinstance(item, dict):
            for key, child in item.items():
                if NUL in key:
                    return name
                stack.append((child, f"{name}.{key}" if name else key))
        elif isinstance(item, list):
            stack.extend((child, f"{name}[{i}]") for i, child in enumerate(item))
    return None
