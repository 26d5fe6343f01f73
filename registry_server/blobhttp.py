"""Serving stored blobs over HTTP, and the app's one `BlobStorage`.

The storage backends hand out files and byte spans; this module decides what to answer (HEAD,
GET, a single byte range, If-None-Match) and builds the response.
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import Flask, Response, current_app, request
from werkzeug.exceptions import RequestedRangeNotSatisfiable
from werkzeug.wsgi import wrap_file

from hubcli.fsutil import CHUNK
from registry_server.storage import BlobStorage, make_storage

EXTENSION = "registry_storage"
OCTET_STREAM = "application/octet-stream"


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


def blob_response(storage: BlobStorage, sha256: str, size: int, *,
                  redirect_ttl: int = 0) -> Response:
    """A response serving the blob to the current request: HEAD, GET, a single byte range
    (206), If-None-Match (304), with `ETag` set to the SHA-256. With `redirect_ttl` > 0 and a
    store that hands out URLs (S3), a GET is answered 302 to a URL valid that many seconds,
    as the Hub redirects to its CDN: the bytes never pass through the registry's workers.

    HEAD and 304 answers come from the size alone: no file is opened, no S3 call made.

    Raises:
        RequestedRangeNotSatisfiable: a range outside the blob (416).
    """
    plan = _Plan.for_request(sha256, size)
    if plan.status == 304 or request.method == "HEAD" or plan.start == plan.stop:
        return Response(status=plan.status, headers=plan.headers, mimetype=OCTET_STREAM)
    url = storage.download_url(sha256, redirect_ttl) if redirect_ttl > 0 else None
    if url is not None:
        # The store answers the range itself; the URL expires, so the answer is not cached.
        return Response(status=302, headers={
            "Location": url, "ETag": plan.headers["ETag"], "Cache-Control": "no-store"})
    whole = storage.local_file(sha256) if plan.status == 200 else None
    # The server's file wrapper: gunicorn hands a whole local file to sendfile().
    body = (wrap_file(request.environ, whole, CHUNK) if whole is not None
            else storage.read_span(sha256, plan.start, plan.stop))
    return Response(body, status=plan.status, headers=plan.headers, mimetype=OCTET_STREAM,
                    direct_passthrough=True)


def init_app(app: Flask) -> None:
    app.extensions[EXTENSION] = make_storage(app.config["STORAGE"],
                                             s3_endpoint_url=app.config["S3_ENDPOINT_URL"])


def get_storage(app: Flask | None = None) -> BlobStorage:
    return (app or current_app).extensions[EXTENSION]
