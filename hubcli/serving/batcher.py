"""Dynamic batching across requests: worker threads take requests off a bounded queue; each
gathers those that arrive within `max_wait` of the oldest (any mix of adapters) up to
`max_tokens` and runs them as one routed forward pass; each caller gets its own rows back
through a future.

With `workers` > 1, one worker gathers the next batch while another's pass runs, and passes
overlap: a pass of a few hundred tokens keeps one core busy and gains next to nothing from a
second intra-op thread, so on a machine with C cores, C workers of one torch thread each serve
more and wait less than one worker with C threads (`hub serve` runs `default_workers()`; a
`BatchSettings` made in code runs one unless told). One worker gathers at a time, by three
rules that keep the tail short:

- the window is counted from the oldest request's arrival, so a backlog runs at once;
- a worker waits for more only while every other worker is running a pass: an idle one would
  take the next request at once, and two passes at once beat one pass twice the size;
- a batch takes at most its share of the work in the house (queued, running and its own,
  in tokens, split evenly between the workers), so one worker does not take a crowd while
  the other idles: the callers in the big batch would wait for all of it.

A request that does not fit its batch stays at the head of the queue for the next batch,
whichever worker gathers it. The queue is bounded so overload is refused at the door (`Busy`,
HTTP 503) instead of growing latency without limit. With batching off every request runs
alone, each worker taking the next.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from hubcli.errors import HubError
from hubcli.serving.engine import Job


class Busy(HubError):
    """The server cannot take the request now: its queue is full, or the adapter cannot be
    attached until other requests are answered (HTTP 503 with Retry-After)."""

    hint = "retry after a moment"


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity; a container's quota may be lower)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_workers() -> int:
    """`hub serve`'s workers: 2, or 1 on one CPU."""
    return min(2, usable_cpus())


@dataclass
class BatchSettings:
    max_wait_ms: float = 5.0
    max_tokens: int = 4096
    queue_size: int = 256
    batching: bool = True
    workers: int = 1


@dataclass
class _Pending:
    job: Job
    future: Future = field(default_factory=Future)
    arrived: float = field(default_factory=time.monotonic)


_STOP = object()


def _tokens(item: Any) -> int:
    return 0 if item is _STOP else item.job.tokens


class _Queue:
    """A bounded FIFO whose head is taken only if it fits; `tokens` is what it holds, by
    `weigh`."""

    def __init__(self, size: int, weigh: Callable[[Any], int]) -> None:
        self._items: deque = deque()
        self._size = size
        self._weigh = weigh
        self._changed = threading.Condition()
        self.tokens = 0

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: Any, *, block: bool) -> bool:
        """Append `item`; False if the queue is full and `block` is False, else waits for room."""
        with self._changed:
            if not block and len(self._items) >= self._size:
                return False
            self._changed.wait_for(lambda: len(self._items) < self._size)
            self._items.append(item)
            self.tokens += self._weigh(item)
            self._changed.notify_all()
            return True

    def take(self, fits: Callable[[Any], bool], timeout: float | None, *,
             give_up: Callable[[], bool] = lambda: False) -> Any:
        """The head, waiting up to `timeout` seconds (None: as long as it takes) for one, or
        until `give_up()` (checked when the queue changes or `wake` is called); None if none
        came or the head does not fit (it stays the head)."""
        with self._changed:
            self._changed.wait_for(lambda: self._items or give_up(), timeout)
            if not self._items or not fits(self._items[0]):
                return None
            item = self._items.popleft()
            self.tokens -= self._weigh(item)
            self._changed.notify_all()
            return item

    def wake(self) -> None:
        """Have waiting takers check `give_up` again."""
        with self._changed:
            self._changed.notify_all()


class Batcher:
    """Runs `run(jobs) -> results per job` on batches of submitted jobs in `workers` threads
    (`run` must allow that many calls at once). `observe(rows, jobs)` is told the size of each
    batch run."""

    def __init__(self, run: Callable[[list[Job]], list], settings: BatchSettings, *,
                 observe: Callable[[int, int], None] = lambda _r, _j: None) -> None:
        if settings.workers < 1:
            raise ValueError(f"workers must be >= 1, got {settings.workers}")
        self.run = run
        self.settings = settings
        self.observe = observe
        self._queue = _Queue(settings.queue_size, _tokens)
        self._gathering = threading.Lock()  # one worker gathers at a time
        self._counting = threading.Lock()
        self._running = self._running_tokens = 0  # passes in progress and their tokens
        self._threads = [threading.Thread(target=self._work, name=f"hub-serve-worker{k}",
                                          daemon=True) for k in range(settings.workers)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Finish every job queued so far, then end the workers."""
        for _ in self._threads:  # a stop mark each, behind every job queued
            self._queue.put(_STOP, block=True)  # a full queue drains: the workers run on
        for thread in self._threads:
            thread.join()

    def depth(self) -> int:
        return len(self._queue)

    def submit(self, job: Job) -> Future:
        """A future of `job`'s results.

        Raises:
            Busy: the queue is full.
        """
        pending = _Pending(job)
        if not self._queue.put(pending, block=False):
            raise Busy(f"the request queue is full ({self.settings.queue_size} waiting)")
        return pending.future

    def _work(self) -> None:
        while True:
            with self._gathering:
                batch = self._gather()
                if batch is None:
                    return
                tokens = sum(p.job.tokens for p in batch)
                self._count(1, tokens)  # before the next worker gathers: it weighs its share
            try:
                self._execute(batch)
            finally:
                self._count(-1, -tokens)

    def _count(self, passes: int, tokens: int) -> None:
        with self._counting:
            self._running += passes
            self._running_tokens += tokens
        if passes < 0:
            self._queue.wake()  # a worker is free: a gatherer waiting for company stops

    def _gather(self) -> list[_Pending] | None:
        """The next batch (None: stop): the first job waits as long as it takes; later ones
        are taken while they fit `max_tokens` and the batch's share, the queued ones at once
        and new ones until `max_wait` after the first's arrival while every other worker
        runs a pass. A job that does not fit, or a stop mark, ends the batch and stays
        queued."""
        first = self._queue.take(lambda _item: True, None)
        if first is _STOP:
            return None
        batch, tokens = [first], first.job.tokens
        if not self.settings.batching:
            return batch
        deadline = first.arrived + self.settings.max_wait_ms / 1000
        workers = self.settings.workers

        def admits(more: int, queued: int) -> bool:
            # within max_tokens and the batch's share of the house's work: queued (`more`
            # included), running, and this batch's
            total = tokens + more
            return (total <= self.settings.max_tokens
                    and total * workers <= queued + tokens + self._running_tokens)

        def fits(item: Any) -> bool:
            return item is not _STOP and admits(item.job.tokens, self._queue.tokens)

        def waiting() -> bool:  # every other worker busy, and room for a one-token request
            return self._running >= workers - 1 and admits(1, self._queue.tokens + 1)

        while True:
            wait = max(deadline - time.monotonic(), 0) if waiting() else 0
            nxt = self._queue.take(fits, wait, give_up=lambda: not waiting())
            if nxt is None:
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
