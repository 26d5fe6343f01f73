"""Content-addressed blob storage: local disk or any S3-compatible store, behind one interface.

A blob is named by the hex SHA-256 of its bytes, so a file is stored once however many
versions use it. Callers verify the digest before `put`; `put` itself is atomic (temp file and
rename on disk; an S3 PUT or completed multipart upload is all-or-nothing) and idempotent.
Backends know nothing of HTTP: they hand out files and byte spans, and `blobhttp` answers
requests with them.
"""

from __future__ import annotations

import os
import shutil
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlparse

from hubcli.fsutil import CHUNK, atomic_copy


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

    @abstractmethod
    def local_file(self, sha256: str) -> BinaryIO | None:
        """The blob as an open local file (a server can hand it to sendfile()), or None for a
        remote store, which serves through `read_span`.

        Raises:
            FileNotFoundError: no such blob.
        """

    @abstractmethod
    def read_span(self, sha256: str, start: int, stop: int) -> Iterator[bytes]:
        """Bytes [start, stop) of the blob, in chunks."""

    def download_url(self, sha256: str, ttl: int) -> str | None:
        """A URL that serves the blob to anyone holding it for `ttl` seconds (ranges too), so
        its bytes need not pass through the registry; None: the registry serves it itself."""
        return None

    @abstractmethod
    def delete(self, sha256: str) -> None: ...

    @abstractmethod
    def digests(self) -> Iterator[tuple[str, float]]:
        """Every stored blob: (SHA-256, time it was stored as a POSIX timestamp)."""


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

    def local_file(self, sha256: str) -> BinaryIO:
        return open(self.path(sha256), "rb")

    def read_span(self, sha256: str, start: int, stop: int) -> Iterator[bytes]:
        return _span(open(self.path(sha256), "rb"), start, stop)

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

    def local_file(self, sha256: str) -> None:
        return None

    def read_span(self, sha256: str, start: int, stop: int) -> Iterator[bytes]:
        obj = self.client.get_object(Bucket=self.bucket, Key=self.key(sha256),
                                     Range=f"bytes={start}-{stop - 1}")
        return obj["Body"].iter_chunks(CHUNK)

    def download_url(self, sha256: str, ttl: int) -> str:
        # Signed locally (no request to S3): costs microseconds, and the URL is GET-only.
        return self.client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": self.key(sha256)},
            ExpiresIn=ttl)

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
