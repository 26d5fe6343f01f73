"""Semantic version precedence (semver.org §11), enough to pick the newest version."""

from __future__ import annotations

import re

VERSION = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                     r"(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def is_version(text: str) -> bool:
    return VERSION.fullmatch(text) is not None


def sort_key(version: str) -> tuple:
    """Key ordering versions by precedence: 1.0.0-alpha < 1.0.0-alpha.1 < 1.0.0-beta < 1.0.0;
    build metadata is ignored.

    Raises:
        ValueError: not a semantic version.
    """
    m = VERSION.fullmatch(version)
    if m is None:
        raise ValueError(f"{version!r} is not a semantic version")
    core = tuple(int(g) for g in m.groups()[:3])
    pre = m.group(4)
    if pre is None:
        return (*core, 1, ())
    # Numeric identifiers sort before alphanumeric ones, and numerically among themselves.
    ids = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (*core, 0, ids)


def is_prerelease(version: str) -> bool:
    m = VERSION.fullmatch(version)
    return bool(m and m.group(4))
