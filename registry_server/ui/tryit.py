"""The adapter page's "Try it" box: the registry forwards a text to a `hub serve` instance
(HUB_REGISTRY_INFERENCE_URL, started with `--allow-pull` against this registry) and shows what
it answers. Plain HTTP: the registry never imports the serving code (or torch).

    POST {INFERENCE_URL}/v1/predict  {"adapter": "NS/NAME@VERSION", "inputs": [text]}
    -> {"adapter": ..., "predictions": [row]}, a row being what `hub predict --json` prints:
       {"label", "score"} (classification), {"entities": [{"text", "type", "start", "end",
       "score"}], "tags"} (tagging), {"score"} (regression), {"answer", ...} (QA)
    -> on refusal, {"error", "hint"} with a 4xx or 5xx status
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import requests

MAX_CHARS = 2000  # what the box accepts: a few sentences, not a document


@dataclass(frozen=True)
class Outcome:
    """What the box shows: a prediction row, or why there is none."""

    text: str
    row: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def segments(self) -> list[tuple[str, dict | None]]:
        """The text cut at the entities of a tagging prediction: (piece, entity or None).
        Entities with offsets outside the text or overlapping an earlier one are skipped
        (they still show in the list below the text)."""
        out: list[tuple[str, dict | None]] = []
        at = 0
        for entity in sorted(self.entities, key=lambda e: e["start"]):
            start, end = entity["start"], entity["end"]
            if start < at or end > len(self.text) or end <= start:
                continue
            out += [(self.text[at:start], None), (self.text[start:end], entity)]
            at = end
        out.append((self.text[at:], None))
        return [(piece, entity) for piece, entity in out if piece]

    @property
    def entities(self) -> list[dict]:
        found = self.row.get("entities")
        if not isinstance(found, list):
            return []
        return [e for e in found if isinstance(e, dict)
                and isinstance(e.get("start"), int) and isinstance(e.get("end"), int)]


def predict(url: str, ref: str, text: str, timeout: float) -> Outcome:
    """Run `text` through adapter `ref` on the `hub serve` at `url`. Never raises: a server
    that cannot be reached, refuses or answers nonsense gives an Outcome with an error that
    says so (the page shows it in the box)."""
    text = text.strip()
    if not text:
        return Outcome(text, error="Type a text to run the adapter on.")
    if len(text) > MAX_CHARS:
        return Outcome(text, error=f"The text has {len(text):,} characters; the box takes "
                                   f"at most {MAX_CHARS:,}.")
    try:
        response = requests.post(f"{url.rstrip('/')}/v1/predict", timeout=timeout,
                                 json={"adapter": ref, "inputs": [text]})
    except requests.Timeout:
        return Outcome(text, error=f"The inference server did not answer within {timeout:g} s; "
                                   "try again in a moment.")
    except requests.RequestException:
        return Outcome(text, error="The inference server cannot be reached right now.")
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return Outcome(text, error=f"The inference server answered {response.status_code} "
                                   "without a JSON object.")
    if response.status_code != 200:
        reason = str(body.get("error") or f"status {response.status_code}")
        hint = f" ({body['hint']})" if body.get("hint") else ""
        return Outcome(text, error=f"The inference server refused: {reason}{hint}.")
    rows = body.get("predictions")
    if not isinstance(rows, list) or len(rows) != 1 or not isinstance(rows[0], dict):
        return Outcome(text, error="The inference server's answer has no prediction.")
    return Outcome(text, row=rows[0])
