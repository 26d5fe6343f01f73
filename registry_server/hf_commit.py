"""Reading the Hub's NDJSON commit payload into a `CommitRequest`, in bounded memory.

One JSON object per line: a header first, then `file` (inline, base64), `lfsFile` (uploaded
earlier through LFS), `deletedFile` and `deletedFolder` operations. Any malformed line is a
`BadRequest` naming its line number.

An inline file's line can be hundreds of MiB of base64. It is never held whole: the line is
read in chunks, the `content` string is base64-decoded piece by piece straight into a temp
file under `workdir` and hashed on the way, and only the small rest of the line (at most
`MAX_LINE_REST` bytes) is parsed as JSON. Every limit (request bytes, bytes per file, bytes of
all inline files, number of operations) is checked while reading, so an oversized push is
refused (413) as soon as it crosses one, whatever its Content-Length said or whether it had one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from hubcli.format import safejson
from hubcli.fsutil import CHUNK
from registry_server.errors import BadRequest, PayloadTooLarge
from registry_server.services.commits import CommitRequest, LfsRef, Limits, StagedFile

# A bundle is a flat folder of plain names: no folders, no dot-files, nothing to traverse.
PATH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
OPERATIONS = ("file", "lfsFile", "deletedFile", "deletedFolder")
# The most a line may hold outside an inline file's base64 content.
MAX_LINE_REST = 64 * 1024
# Where a streamed line's content string starts. Inside a JSON string every '"' is escaped,
# so this can only match a real key; the rest of the line is parsed and checked after.
CONTENT = re.compile(rb'"content"\s*:\s*"')
LFS_HINT = "upload large files through LFS, or raise HUB_REGISTRY_MAX_FILE_SIZE"


def check_path(path: Any, where: str = "") -> str:
    """Raises: BadRequest: `path` is not a plain file name (folders, '..', odd characters)."""
    if not isinstance(path, str) or not PATH.fullmatch(path) or ".." in path:
        raise BadRequest(f"{where}path {path!r} is not allowed",
                         hint="a bundle is a flat folder of plain file names (letters, digits, "
                              "'.', '_', '-'; no folders)")
    return path


def request_limit(limits: Limits) -> int:
    """The most bytes a commit request may have: every file inline (base64 grows data by 4/3),
    plus room for the JSON around them."""
    return 4 * (limits.max_bundle_size // 3 + 1) + (1 << 20)


def parse(stream: IO[bytes], *, workdir: Path, limits: Limits) -> CommitRequest:
    """Read the payload from `stream`, staging inline files in `workdir`.

    Raises:
        BadRequest: bad JSON, missing or misplaced header, unknown operation, bad field, a path
            given twice. PayloadTooLarge: the request, a file, the inline files together or
            the number of operations is above its limit (checked while reading).
    """
    return _Parser(_Body(stream, request_limit(limits)), workdir, limits).run()


class _Body:
    """The request body, read in chunks and counted against `max_bytes`."""

    def __init__(self, stream: IO[bytes], max_bytes: int) -> None:
        self.stream, self.max_bytes = stream, max_bytes
        self.buffer = bytearray()
        self.received = 0
        self.eof = False

    def fill(self) -> bool:
        """Append the next chunk to the buffer; False at the end of the body.

        Raises:
            PayloadTooLarge: more than `max_bytes` received.
        """
        if self.eof:
            return False
        chunk = self.stream.read(CHUNK)
        if not chunk:
            self.eof = True
            return False
        self.received += len(chunk)
        if self.received > self.max_bytes:
            raise PayloadTooLarge(f"the commit request is larger than {self.max_bytes} bytes, "
                                  "the most allowed (from MAX_BUNDLE_SIZE)",
                                  hint="raise HUB_REGISTRY_MAX_BUNDLE_SIZE")
        self.buffer += chunk
        return True

    def take_line(self, limit: int) -> bytes | None:
        """The next line if it ends within `limit` bytes (or the body ends), else None."""
        start = 0
        while True:
            end = self.buffer.find(b"\n", start, limit + 1)
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[:end + 1]
                return line
            if len(self.buffer) > limit:
                return None
            start = len(self.buffer)
            if not self.fill():
                line = bytes(self.buffer)
                self.buffer.clear()
                return line

    def at_end(self) -> bool:
        return not self.buffer and not self.fill()


@dataclass
class _Counts:
    operations: int = 0
    files: int = 0
    inline_bytes: int = 0


class _Parser:
    def __init__(self, body: _Body, workdir: Path, limits: Limits) -> None:
        self.body, self.workdir, self.limits = body, workdir, limits
        self.request = CommitRequest()
        self.seen: set[str] = set()
        self.counts = _Counts()

    def run(self) -> CommitRequest:
        number = 0
        while not self.body.at_end():
            number += 1
            where = f"line {number}: "
            line = self.body.take_line(MAX_LINE_REST)
            if line is None:
                self._streamed_file(number, where)
                continue
            if not line.strip():
                continue
            key, value = _operation(line, number)
            if (number == 1) != (key == "header"):
                raise BadRequest(f"{where}the header must come first, and only once")
            if key == "header":
                _read_header(value, self.request, where)
            else:
                self._add(key, value, number, where)
        if number == 0:
            raise BadRequest("the commit is empty; send a header line and operations")
        return self.request

    def _add(self, key: str, value: dict[str, Any], number: int, where: str) -> None:
        path = self._new_path(value, where, counts_as_file=key in ("file", "lfsFile"))
        if key == "file":
            content, encoding = value.get("content"), value.get("encoding", "base64")
            if encoding != "base64" or not isinstance(content, str):
                raise BadRequest(f"{where}{path}: content must be a base64 string "
                                 "(encoding 'base64')")
            with self._decoder(path, number, where) as decoder:
                decoder.feed(content.encode("ascii", "replace"))
        elif key == "lfsFile":
            self.request.lfs.append(_lfs_ref(value, path, where))
        elif key == "deletedFile":
            self.request.deleted_files.append(path)
        else:
            self.request.deleted_folders.append(path)

    def _new_path(self, value: dict[str, Any], where: str, *, counts_as_file: bool) -> str:
        path = check_path(value.get("path"), where)
        if path in self.seen:
            raise BadRequest(f"{where}{path} appears twice in the commit")
        self.seen.add(path)
        self.counts.operations += 1
        self.counts.files += counts_as_file
        max_files = self.limits.max_files
        if self.counts.files > max_files:
            raise PayloadTooLarge(f"the commit sends more than {max_files} files, the most "
                                  "allowed (MAX_COMMIT_FILES)")
        # Deletions only name files a version can hold: more than that is a flood.
        if self.counts.operations > 2 * max_files:
            raise PayloadTooLarge(f"the commit has more than {2 * max_files} operations "
                                  "(twice MAX_COMMIT_FILES)")
        return path

    def _decoder(self, path: str, number: int, where: str) -> _Decoder:
        return _Decoder(self, path, self.workdir / f"staged-{number}", where)

    def _streamed_file(self, number: int, where: str) -> None:
        """A line too long to hold: an inline file whose content is decoded as it arrives."""
        if number == 1:
            raise BadRequest(f"{where}the header must come first, and only once")
        body = self.body
        start = CONTENT.search(body.buffer, 0, MAX_LINE_REST)
        if start is None:
            raise BadRequest(f"{where}more than {MAX_LINE_REST} bytes outside a file's content",
                             hint=LFS_HINT)
        head = bytes(body.buffer[:start.end() - 1])
        del body.buffer[:start.end()]
        # The path may come after the content: until it is read, the file has no name.
        with self._decoder("the inline file", number, where) as decoder:
            while (quote := body.buffer.find(b'"')) < 0:
                decoder.feed(bytes(body.buffer))
                body.buffer.clear()
                if not body.fill():
                    raise BadRequest(f"{where}the content string never ends")
            decoder.feed(bytes(body.buffer[:quote]))
            del body.buffer[:quote + 1]
            rest = body.take_line(MAX_LINE_REST)
            if rest is None:
                raise BadRequest(f"{where}more than {MAX_LINE_REST} bytes outside a file's "
                                 "content", hint=LFS_HINT)
            key, value = _operation(head + b'""' + rest, number)
            if key != "file" or value.get("content") != "":
                raise BadRequest(f"{where}only a 'file' operation's content may be this long")
            if value.get("encoding", "base64") != "base64":
                raise BadRequest(f"{where}content must be a base64 string (encoding 'base64')")
            decoder.path = self._new_path(value, where, counts_as_file=True)


class _Decoder:
    """Decodes base64 pieces into a staged file, hashing and counting on the way; on leaving
    its `with` block, checks the padding and records the `StagedFile`."""

    def __init__(self, parser: _Parser, path: str, dest: Path, where: str) -> None:
        self.parser, self.path, self.dest, self.where = parser, path, dest, where
        self.sha256 = hashlib.sha256()
        self.size = 0
        self.carry = b""
        self.padded = False

    def __enter__(self) -> _Decoder:
        self.out = open(self.dest, "wb")
        return self

    def __exit__(self, kind, *_) -> None:
        self.out.close()
        if kind is not None:
            return
        if self.carry:
            raise self._not_base64()
        self.parser.request.staged.append(
            StagedFile(self.path, self.dest, self.sha256.hexdigest(), self.size))

    def feed(self, text: bytes) -> None:
        """Decode the next piece of base64 text (any length; a partial quad waits)."""
        data = self.carry + text if self.carry else text
        cut = len(data) - len(data) % 4
        self.carry = data[cut:]
        if not cut:
            return
        if self.padded:  # data after '=' padding
            raise self._not_base64()
        quads = data[:cut]
        try:
            raw = base64.b64decode(quads, validate=True)
        except (binascii.Error, ValueError):
            raise self._not_base64() from None
        self.padded = quads.endswith(b"=")
        self._write(raw)

    def _write(self, raw: bytes) -> None:
        limits, counts = self.parser.limits, self.parser.counts
        self.size += len(raw)
        counts.inline_bytes += len(raw)
        if self.size > limits.max_file_size:
            raise PayloadTooLarge(f"{self.where}{self.path} is larger than {limits.max_file_size} bytes, "
                                  "the most allowed per file (MAX_FILE_SIZE)",
                                  hint=LFS_HINT)
        if counts.inline_bytes > limits.max_bundle_size:
            raise PayloadTooLarge(f"{self.where}the commit's files are larger than {limits.max_bundle_size} "
                                  "bytes together, the most allowed (MAX_BUNDLE_SIZE)",
                                  hint="raise HUB_REGISTRY_MAX_BUNDLE_SIZE")
        self.sha256.update(raw)
        self.out.write(raw)

    def _not_base64(self) -> BadRequest:
        return BadRequest(f"{self.where}{self.path}: content is not valid base64")


def _operation(raw: bytes, number: int) -> tuple[str, dict[str, Any]]:
    try:
        obj = safejson.loads(raw)
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
    if not isinstance(summary, str) or "\0" in summary:
        raise BadRequest(f"{where}header summary must be a string without NUL characters")
    if parent is not None and (not isinstance(parent, str) or not COMMIT.fullmatch(parent)):
        raise BadRequest(f"{where}parentCommit must be a 40-hex commit id")
    request.summary, request.parent_commit = summary, parent


def _lfs_ref(value: dict[str, Any], path: str, where: str) -> LfsRef:
    oid, size, algo = value.get("oid"), value.get("size"), value.get("algo", "sha256")
    if algo != "sha256" or not isinstance(oid, str) or not SHA256.fullmatch(oid):
        raise BadRequest(f"{where}{path}: lfsFile needs algo 'sha256' and a 64-hex oid")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise BadRequest(f"{where}{path}: lfsFile size must be a non-negative integer")
    return LfsRef(path, oid, size)
