"""Reading the Hub's NDJSON commit payload into a `CommitRequest`.

One JSON object per line: a header first, then `file` (inline, base64), `lfsFile` (uploaded
earlier through LFS), `deletedFile` and `deletedFolder` operations. Inline files are decoded
straight into temp files under `workdir` and hashed on the way. Any malformed line is a
`BadRequest` naming its line number.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from hubcli.fsutil import CHUNK
from registry_server.errors import BadRequest, PayloadTooLarge
from registry_server.services.commits import CommitRequest, LfsRef, StagedFile

# A bundle is a flat folder of plain names: no folders, no dot-files, nothing to traverse.
PATH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
OPERATIONS = ("file", "lfsFile", "deletedFile", "deletedFolder")


def check_path(path: Any, where: str = "") -> str:
    """Raises: BadRequest: `path` is not a plain file name (folders, '..', odd characters)."""
    if not isinstance(path, str) or not PATH.fullmatch(path) or ".." in path:
        raise BadRequest(f"{where}path {path!r} is not allowed",
                         hint="a bundle is a flat folder of plain file names (letters, digits, "
                              "'.', '_', '-'; no folders)")
    return path


def _lines(stream: IO[bytes], max_line: int) -> Iterator[bytes]:
    """The payload's lines (without newline). Reads in large chunks: a WSGI stream's own
    readline() can go byte by byte."""
    buffer = bytearray()
    while chunk := stream.read(CHUNK):
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", start)) >= 0:
            yield bytes(buffer[start:end])
            start = end + 1
        del buffer[:start]
        if len(buffer) > max_line:
            raise PayloadTooLarge(f"a commit line is longer than {max_line} bytes",
                                  hint="upload large files through LFS, or raise "
                                       "HUB_REGISTRY_MAX_FILE_SIZE")
    if buffer:
        yield bytes(buffer)


def parse(stream: IO[bytes], *, workdir: Path, max_file_size: int) -> CommitRequest:
    """Read the payload from `stream`, staging inline files in `workdir`.

    Raises:
        BadRequest: bad JSON, missing or misplaced header, unknown operation, bad field, a path
            given twice. PayloadTooLarge: a file above `max_file_size`.
    """
    request = CommitRequest()
    seen: set[str] = set()
    max_line = 4 * (max_file_size // 3 + 1) + 4096  # base64 grows data by 4/3
    number = 0
    for number, raw in enumerate(_lines(stream, max_line), 1):
        if not raw.strip():
            continue
        key, value = _operation(raw, number)
        where = f"line {number}: "
        if (number == 1) != (key == "header"):
            raise BadRequest(f"{where}the header must come first, and only once")
        if key == "header":
            _read_header(value, request, where)
            continue
        path = check_path(value.get("path"), where)
        if path in seen:
            raise BadRequest(f"{where}{path} appears twice in the commit")
        seen.add(path)
        if key == "file":
            request.staged.append(_stage(value, path, workdir, number, max_file_size, where))
        elif key == "lfsFile":
            request.lfs.append(_lfs_ref(value, path, where))
        elif key == "deletedFile":
            request.deleted_files.append(path)
        else:
            request.deleted_folders.append(path)
    if number == 0:
        raise BadRequest("the commit is empty; send a header line and operations")
    return request


def _operation(raw: bytes, number: int) -> tuple[str, dict[str, Any]]:
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"line {number}: not valid JSON ({e})",
                         hint="send application/x-ndjson: one JSON object per line") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("value"), dict):
        raise BadRequest(f"line {number}: expected {{\"key\": ..., \"value\": {{...}}}}")
    key = obj.get("key")
    if key != "header" and key not in OPERATIONS:
        raise BadRequest(f"line {number}: unknown key {key!r}; use header, "
                         + ", ".join(OPERATIONS))
    return key, obj["value"]


def _read_header(value: dict[str, Any], request: CommitRequest, where: str) -> None:
    summary, parent = value.get("summary", ""), value.get("parentCommit")
    if not isinstance(summary, str):
        raise BadRequest(f"{where}header summary must be a string")
    if parent is not None and (not isinstance(parent, str) or not COMMIT.fullmatch(parent)):
        raise BadRequest(f"{where}parentCommit must be a 40-hex commit id")
    request.summary, request.parent_commit = summary, parent


def _stage(value: dict[str, Any], path: str, workdir: Path, number: int, max_file_size: int,
           where: str) -> StagedFile:
    content, encoding = value.get("content"), value.get("encoding", "base64")
    if encoding != "base64" or not isinstance(content, str):
        raise BadRequest(f"{where}{path}: content must be a base64 string (encoding 'base64')")
    try:
        data = base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where}{path}: content is not valid base64") from None
    if len(data) > max_file_size:
        raise PayloadTooLarge(f"{path} has {len(data)} bytes; at most {max_file_size} are "
                              "allowed per file")
    source = workdir / f"staged-{number}"
    source.write_bytes(data)
    return StagedFile(path, source, hashlib.sha256(data).hexdigest(), len(data))


def _lfs_ref(value: dict[str, Any], path: str, where: str) -> LfsRef:
    oid, size, algo = value.get("oid"), value.get("size"), value.get("algo", "sha256")
    if algo != "sha256" or not isinstance(oid, str) or not SHA256.fullmatch(oid):
        raise BadRequest(f"{where}{path}: lfsFile needs algo 'sha256' and a 64-hex oid")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise BadRequest(f"{where}{path}: lfsFile size must be a non-negative integer")
    return LfsRef(path, oid, size)
