"""Printing results: readable tables for people, JSON (lines) for scripts."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence

import click


def echo_json(obj) -> None:
    click.echo(json.dumps(obj, ensure_ascii=False))


MAX_ECHO_CHARS = 1000  # of an input text repeated in JSON output (a 50 MB line is not echoed)


def echo_text(text: str) -> str:
    """`text` as JSON output repeats it: whole when short, else its start and an ellipsis."""
    return text if len(text) <= MAX_ECHO_CHARS else text[:MAX_ECHO_CHARS - 1] + "…"


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, max_width: int = 60) -> None:
    """A plain aligned table; long cells are shortened with an ellipsis."""

    def cell(v: object) -> str:
        s = f"{v:.4f}" if isinstance(v, float) else str(v)
        s = s.replace("\n", " ")
        return s if len(s) <= max_width else s[: max_width - 1] + "…"

    body = [[cell(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    click.echo(line.rstrip())
    click.echo("  ".join("-" * w for w in widths))
    for r in body:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def notice_once() -> Callable[[str], None]:
    """A `notice` saying each message once, from any thread, where one run verifies an
    adapter again: a component two composed adapters share (`hub predict -a`), a server
    reloading an adapter after an eviction (`hub serve`)."""
    said: set[str] = set()
    lock = threading.Lock()

    def say(msg: str) -> None:
        with lock:
            new = msg not in said
            said.add(msg)
        if new:
            notice(msg)
    return say


def notice(msg: str) -> None:
    """Notices and warnings go to stderr so --json output stays clean."""
    click.echo(msg, err=True)
