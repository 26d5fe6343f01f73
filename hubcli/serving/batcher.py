"""Dynamic batching across requests: one worker thread takes requests off a bounded queue,
gathers those that arrive within `max_wait` (any mix of adapters) up to `max_tokens`, and runs
them as one routed forward pass; each caller gets its own rows back through a future.

The queue is bounded so overload is refused at the door (`Busy`, HTTP 503) instead of growing
latency without limit. With batching off every request runs alone, one after another: the
model's routing state belongs to one pass at a time, so passes never overlap.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable

from hubcli.errors import HubError
from hubcli.serving.engine import Job


class Busy(HubError):
    """The request queue is full."""

    hint = "retry after a moment"


@dataclass
class BatchSettings:
    max_wait_ms: float = 5.0
    max_tokens: int = 4096
    queue_size: int = 256
    batching: bool = True


@dataclass
class _Pending:
    job: Job
    future: Future = field(default_factory=Future)


_STOP = object()


class Batcher:
    """Runs `run(jobs) -> results per job` on batches of submitted jobs in one worker thread.
    `observe(rows, jobs)` is told the size of each batch it ran."""

    def __init__(self, run: Callable[[list[Job]], list], settings: BatchSettings, *,
                 observe: Callable[[int, int], None] = lambda _r, _j: None) -> None:
        self.run = run
        self.settings = settings
        self.observe = observe
        self._queue: queue.Queue = queue.Queue(maxsize=settings.queue_size)
        self._carry: _Pending | None = None
        self._thread = threading.Thread(target=self._work, name="hub-serve-batcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Finish every job queued so far, then end the worker."""
        self._queue.put(_STOP)  # blocking: a full queue drains, the worker keeps running
        self._thread.join()

    def depth(self) -> int:
        return self._queue.qsize()

    def submit(self, job: Job) -> Future:
        """A future of `job`'s results.

        Raises:
            Busy: the queue is full.
        """
        pending = _Pending(job)
        try:
            self._queue.put_nowait(pending)
        except queue.Full:
            raise Busy(f"the request queue is full ({self.settings.queue_size} waiting)") from None
        return pending.future

    def _work(self) -> None:
        while True:
            batch = self._gather()
            if batch is None:
                return
            self._execute(batch)

    def _gather(self) -> list[_Pending] | None:
        """The next batch: the first job waits as long as it takes, later ones at most until
        `max_wait` after it; a job that would overflow `max_tokens` opens the next batch."""
        first = self._carry or self._queue.get()
        self._carry = None
        if first is _STOP:
            return None
        batch, tokens = [first], first.job.tokens
        if not self.settings.batching:
            return batch
        deadline = time.monotonic() + self.settings.max_wait_ms / 1000
        while True:
            try:
                nxt = self._queue.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                return batch
            if nxt is _STOP or tokens + nxt.job.tokens > self.settings.max_tokens:
                self._carry = nxt
                return batch
            batch.append(nxt)
            tokens += nxt.job.tokens

    def _execute(self, batch: list[_Pending]) -> None:
        live = [p for p in batch if p.future.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            results = self.run([p.job for p in live])
        except Exception as err:  # one bad batch fails its callers, never the worker
            if len(live) > 1:
                for p in live:  # find the culprit: run each alone
                    self._execute_alone(p)
                return
            live[0].future.set_exception(err)
            return
        self.observe(sum(len(p.job.texts) for p in live), len(live))
        for p, result in zip(live, results):
            p.future.set_result(result)

    def _execute_alone(self, pending: _Pending) -> None:
        try:
            result = self.run([pending.job])[0]
        except Exception as err:
            pending.future.set_exception(err)
            return
        self.observe(len(pending.job.texts), 1)
        pending.future.set_result(result)
