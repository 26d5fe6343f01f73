"""Content-addressed blob storage: local disk or any S3-compatible store, behind one interface.

A blob is named by the hex SHA-256 of its bytes, so a file is stored once however many
versions use it. Callers verify the digest before `put`; `put` itself is atomic (temp file and
rename on disk; an S3 PUT or completed multipart upload is all-or-nothing) and idempotent.
"""

from __future__ import annotations

import os
import shutil
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlparse

from flask import Flask, Response, current_app, request
from werkzeug.exceptions import RequestedRangeNotSatisfiable
from werkzeug.wsgi import wrap_file

from hubcli.fsutil import atomic_copy

EXTENSION = "registry_storage"
CHUNK = 1 << 20
OCTET_STREAM = "application/octet-stream"


class BlobStorage(ABC):
    @abstractmethod
    def exists(self, sha256: str) -> bool: ...

    @abstractmethod
    def put(self, sha256: str, source: Path) -> None:
        """Store the file `source` as blob `sha256` (whose digest the caller has checked)."""

    @abstractmethod
    def copy_to(self, sha256: str, dest: Path) -> None:
        """Write blob `sha256` to the local file `dest`, which is for reading only (disk
        storage hard-links it when it can, rather than copying).

        Raises:
            FileNotFoundError: no such blob.
        """

    def response(self, sha256: str, size: int) -> Response:
        """A response serving the blob to the current request: HEAD, GET, a single byte range
        (206), If-None-Match (304), with `ETag` set to the SHA-256.

        HEAD and 304 answers come from the size alone: no file is opened, no S3 call made.

        Raises:
            RequestedRangeNotSatisfiable: a range outside the blob (416).
        """
        plan = _Plan.for_request(sha256, size)
        if plan.status == 304 or request.method == "HEAD" or plan.start == plan.stop:
            return Response(status=plan.status, headers=plan.headers, mimetype=OCTET_STREAM)
        return self._body(sha256, plan)

    @abstractmethod
    def _body(self, sha256: str, plan: _Plan) -> Response:
        """The GET response for bytes [plan.start, plan.stop) of the blob."""

    @abstractmethod
    def delete(self, sha256: str) -> None: ...

    @abstractmethod
    def digests(self) -> Iterator[tuple[str, float]]:
        """Every stored blob: (SHA-256, time it was stored as a POSIX timestamp)."""


@dataclass(frozen=True)
class _Plan:
    """What to answer: status, headers, and the byte span of the blob to send."""

    status: int
    start: int
    stop: int
    headers: dict[str, str]

    @classmethod
    def for_request(cls, sha256: str, size: int) -> _Plan:
        headers = {"ETag": f'"{sha256}"', "Accept-Ranges": "bytes"}
        if request.if_none_match.contains(sha256):
            return cls(304, 0, 0, headers)
        if request.range is None:
            return cls(200, 0, size, {**headers, "Content-Length": str(size)})
        span = request.range.range_for_length(size)
        if span is None:
            raise RequestedRangeNotSatisfiable(length=size)
        start, stop = span
        return cls(206, start, stop, {**headers, "Content-Length": str(stop - start),
                                      "Content-Range": f"bytes {start}-{stop - 1}/{size}"})


def _span(f: BinaryIO, start: int, stop: int) -> Iterator[bytes]:
    """Bytes [start, stop) of an open file, in chunks; closes it."""
    with f:
        f.seek(start)
        left = stop - start
        while left > 0 and (chunk := f.read(min(CHUNK, left))):
            left -= len(chunk)
            yield chunk


def _fanout(sha256: str) -> str:
    # Two levels of 256 folders keep directories (and S3 listings) small.
    return f"{sha256[:2]}/{sha256[2:4]}/{sha256}"


def _link_into(source: Path, final: Path) -> None:
    """Hard-link `source` to `final` atomically (a temp link renamed over), read-only.

    Raises:
        OSError: linking is not possible (another file system, or no hard links).
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{uuid.uuid4().hex}")
    os.link(source, tmp)
    try:
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class DiskStorage(BlobStorage):
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, sha256: str) -> Path:
        return self.root / _fanout(sha256)

    def exists(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def put(self, sha256: str, source: Path) -> None:
        final = self.path(sha256)
        if final.exists():
            return
        try:
            # Same file system (the instance's tmp folder): store by linking, not copying.
            _link_into(source, final)
        except OSError:
            atomic_copy(source, final, mode=0o644)

    def copy_to(self, sha256: str, dest: Path) -> None:
        try:
            os.link(self.path(sha256), dest)
        except FileNotFoundError:
            raise
        except OSError:
            shutil.copyfile(self.path(sha256), dest)

    def _body(self, sha256: str, plan: _Plan) -> Response:
        f = open(self.path(sha256), "rb")
        if plan.status == 200:
            # The server's file wrapper: gunicorn hands the file to sendfile().
            body = wrap_file(request.environ, f, CHUNK)
        else:
            body = _span(f, plan.start, plan.stop)
        return Response(body, status=plan.status, headers=plan.headers, mimetype=OCTET_STREAM,
                        direct_passthrough=True)

    def delete(self, sha256: str) -> None:
        self.path(sha256).unlink(missing_ok=True)

    def digests(self) -> Iterator[tuple[str, float]]:
        for path in self.root.glob("??/??/*"):
            if not path.name.startswith("."):
                yield path.name, path.stat().st_mtime


class S3Storage(BlobStorage):
    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url or None

    @cached_property
    def client(self):
        # Created on first use, so each worker process gets its own connection pool.
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url)

    def key(self, sha256: str) -> str:
        return f"{self.prefix}/{_fanout(sha256)}" if self.prefix else _fanout(sha256)

    def exists(self, sha256: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self.key(sha256))
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def put(self, sha256: str, source: Path) -> None:
        if not self.exists(sha256):
            self.client.upload_file(str(source), self.bucket, self.key(sha256))

    def copy_to(self, sha256: str, dest: Path) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.download_file(self.bucket, self.key(sha256), str(dest))
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise FileNotFoundError(f"no blob {sha256}") from None
            raise

    def _body(self, sha256: str, plan: _Plan) -> Response:
        obj = self.client.get_object(Bucket=self.bucket, Key=self.key(sha256),
                                     Range=f"bytes={plan.start}-{plan.stop - 1}")
        return Response(obj["Body"].iter_chunks(CHUNK), status=plan.status, headers=plan.headers,
                        mimetype=OCTET_STREAM, direct_passthrough=True)

    def delete(self, sha256: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self.key(sha256))

    def digests(self) -> Iterator[tuple[str, float]]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/" if self.prefix else "")
        for page in pages:
            for obj in page.get("Contents", []):
                yield obj["Key"].rsplit("/", 1)[-1], obj["LastModified"].timestamp()


def make_storage(spec: str, *, s3_endpoint_url: str | None = None) -> BlobStorage:
    """`s3://bucket/prefix` -> S3Storage; anything else is a local folder.

    Raises:
        ValueError: an s3:// URL without a bucket.
    """
    if spec.startswith("s3://"):
        url = urlparse(spec)
        if not url.netloc:
            raise ValueError(f"storage {spec!r} names no bucket; use s3://bucket/prefix")
        return S3Storage(url.netloc, url.path, endpoint_url=s3_endpoint_url)
    return DiskStorage(Path(spec))


def init_app(app: Flask) -> None:
    app.extensions[EXTENSION] = make_storage(app.config["STORAGE"],
                                             s3_endpoint_url=app.config["S3_ENDPOINT_URL"])


def get_storage(app: Flask | None = None) -> BlobStorage:
    return (app or current_app).extensions[EXTENSION]
