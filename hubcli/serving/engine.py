"""The serving engine: one frozen base with several adapters attached, answering a batch of
requests for any mix of them (the untouched base included: its sentence embedding; fusions
and stacks too) in one routed forward pass.

Adapters are attached under slot names (`slot0`, `slot1`, ...) because the names people use
(`alice/sst2-adapter`, `./my-adapter`) may hold characters a module name cannot; the pool
(`pool.py`) maps what a request names to its slot.
"""

from __future__ import annotations

import itertools
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator


@dataclass
class Job:
    """One request's work: texts through one adapter (a slot name, or `BASE`)."""

    adapter: str
    texts: list[str]
    tokens: int


class OneCallAtATime:
    """A tokenizer whose calls run one at a time: ours and transformers' fast tokenizers set
    truncation on their shared backend at every call, and the workers and the request
    handlers (counting tokens) call at once. Everything else is the tokenizer's own."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return self._tokenizer(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


class PassLock:
    """Passes share the model; attaching or detaching an adapter changes it, so it waits for
    the passes running to end, and passes that come after it wait for it (a waiting change
    is never starved by a stream of passes)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._passes = 0
        self._changing = False
        self._waiting = 0

    @contextmanager
    def passing(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._changing and not self._waiting)
            self._passes += 1
        try:
            yield
        finally:
            with self._cond:
                self._passes -= 1
                self._cond.notify_all()

    @contextmanager
    def changing(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: not self._changing and not self._passes)
            self._waiting -= 1
            self._changing = True
        try:
            yield
        finally:
            with self._cond:
                self._changing = False
                self._cond.notify_all()


class Engine:
    """A base and the adapters attached to it, each in a slot. `run` may be called from
    several worker threads at once (each pass routes its own rows); `attach` and `detach`
    may come from any thread and wait for the passes running."""

    def __init__(self, base: str | None = None, *, device: str = "cpu",
                 allow_unsigned: bool = False, allow_base_mismatch: bool = False,
                 notify: Callable[[str], None] = lambda _m: None) -> None:
        """Raises: OptionError (`device`), ModelError (the base)."""
        from hubcli.api import AdapterHub

        self.hub = AdapterHub(base, device=device, notify=notify, warn_inputs=False)
        self.hub.base.tokenizer = OneCallAtATime(self.hub.base.tokenizer)
        self.attach_policy = {"allow_unsigned": allow_unsigned,
                              "allow_base_mismatch": allow_base_mismatch}
        self._lock = PassLock()
        self._slots = itertools.count()

    def attach(self, folder: Path) -> str:
        """Verify the adapter in `folder` and attach it in a new slot; the slot.

        A composed adapter (a fusion, a stack) brings its components, attached under their
        manifests' names and shared by the composed adapters that pin the same ones; they go
        when the last of those is detached.

        Raises:
            SignatureError, BundleError, ManifestError, BaseMismatchError, AdapterError (also
                a component whose name another composed adapter's component holds, in
                another version).
        """
        from hubcli.local.attach import verify_adapter

        bundle = verify_adapter(Path(folder), allow_unsigned=self.attach_policy["allow_unsigned"],
                                notify=self.hub.notify)
        slot = f"slot{next(self._slots)}"
        with self._lock.changing():
            self.hub.add(bundle, name=slot,
                         allow_base_mismatch=self.attach_policy["allow_base_mismatch"])
        return slot

    def detach(self, slot: str) -> None:
        with self._lock.changing():
            self.hub.remove(slot)

    def manifest(self, slot: str) -> dict:
        return self.hub.manifests[slot]

    def holdings(self, slot: str) -> dict[str, int]:
        """Memory the adapter in `slot` holds, in bytes by what holds it: its own weights,
        LayerNorm deltas and head, and a composed adapter's components' (shared by the
        composed adapters that pin the same ones)."""
        model = self.hub.model
        return {name: sum(t.numel() * t.element_size()
                          for t in model.named_adapter_tensors(name).values())
                for name in self.hub.holds(slot)}

    def requires(self, slot: str) -> tuple[str, ...]:
        """The components the adapter in `slot` attaches as well, at any depth, by the names they
        are attached under (their manifests')."""
        return tuple(self.hub.requires(slot))

    def count_tokens(self, slot: str, texts: list[str]) -> int:
        """Tokens `texts` take in a batch for `slot`, as its pass runs them
        (`AdapterHub.count_tokens`).

        Raises:
            AdapterError: no adapter in `slot`.
            UsageError: a text the adapter's task cannot take.
        """
        return self.hub.count_tokens(texts, adapter=slot)

    def run(self, jobs: list[Job]) -> list[list[dict]]:
        """Every job's predictions, the rows of all jobs routed together (one pass per 64
        rows, `AdapterHub.predict` with one adapter per text): per text what `hub predict
        --json` prints for it ({"text": ..., **prediction}).

        Raises:
            AdapterError, DataError: an input the adapter's task cannot take.
        """
        texts = [t for job in jobs for t in job.texts]
        with self._lock.passing():
            flat = self.hub.predict(texts, adapter=[job.adapter for job in jobs
                                                    for _ in job.texts])
        out, start = [], 0
        for job in jobs:
            mine = flat[start:start + len(job.texts)]
            out.append([{"text": t, **p} for t, p in zip(job.texts, mine)])
            start += len(job.texts)
        return out
