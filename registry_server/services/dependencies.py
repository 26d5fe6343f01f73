"""Which versions a composed version requires (its manifest's `requires`), recorded at push:
"uses" and "used by" on the adapter page, deleting a required version refused (409, naming
the dependants), yanking allowed with a warning on the dependants' pages."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from hubcli.format.manifest import MANIFEST
from registry_server.errors import Conflict, Rejected
from registry_server.models import Adapter, Namespace, Requirement, Version


def resolve(session: Session, manifest: dict[str, Any]) -> list[Version]:
    """The versions a pushed manifest requires, in order: each must be on this registry (by
    its `ref`), live, with the pinned manifest digest.

    Raises:
        Rejected: a requirement with no registry reference, not here, deleted, or whose
            manifest digest differs (each named).
    """
    found = []
    for entry in manifest.get("requires", ()):
        label = f"{entry.get('ref', entry['name'])}@{entry['version']}"
        if "ref" not in entry:
            raise Rejected(f"manifest.json requires {label} by a local folder only; others "
                           "could not get it", hint="push that adapter first, then re-create "
                           "this one from its reference (hub fuse --adapters NS/NAME@VERSION)")
        namespace, name = entry["ref"].split("/", 1)
        version = session.scalar(
            select(Version).join(Adapter, Version.adapter_id == Adapter.id)
            .join(Namespace, Adapter.namespace_id == Namespace.id)
            .where(Namespace.name == namespace, Adapter.name == name,
                   Version.version == entry["version"], Version.deleted_at.is_(None)))
        if version is None:
            raise Rejected(f"manifest.json requires {label}, which this registry does not have",
                           hint="push the required adapter here first")
        digest = next((f.blob_sha256 for f in version.files if f.path == MANIFEST), None)
        if digest != entry["manifest_sha256"]:
            raise Rejected(f"manifest.json requires {label} with manifest sha256 "
                           f"{entry['manifest_sha256']}, but this registry's {label} has "
                           f"{digest}", hint="compose it from the version pushed here")
        found.append(version)
    return found


def record(version: Version, required: list[Version]) -> list[Requirement]:
    """Rows for `version`'s requirements (added with it, in its commit)."""
    return [Requirement(version=version, position=i, required=r) for i, r in enumerate(required)]


def uses(session: Session, version: Version) -> list[Version]:
    """What `version` requires, in its manifest's order."""
    return list(session.scalars(
        select(Version).join(Requirement, Requirement.required_version_id == Version.id)
        .where(Requirement.version_id == version.id).order_by(Requirement.position)))


def used_by(session: Session, version: Version) -> list[Version]:
    """The live versions that require `version`."""
    return list(session.scalars(
        select(Version).join(Requirement, Requirement.version_id == Version.id)
        .where(Requirement.required_version_id == version.id, Version.deleted_at.is_(None))
        .order_by(Version.id)))


def refuse_if_required(session: Session, version: Version) -> None:
    """Raises: Conflict (409): live versions require `version`, named."""
    dependants = used_by(session, version)
    if dependants:
        names = ", ".join(f"{v.adapter.repo_id}@{v.version}" for v in dependants)
        raise Conflict(f"{version.adapter.repo_id}@{version.version} is required by {names}",
                       hint="delete those first, or yank this version instead (dependants keep "
                            "working and show a warning)")


def yanked_uses(session: Session, version: Version) -> list[str]:
    """A warning line for each yanked version that `version` requires."""
    return [f"uses {v.adapter.repo_id}@{v.version}, which is yanked"
            + (f": {v.yank_reason}" if v.yank_reason else "")
            for v in uses(session, version) if v.yanked]
