"""Which adapters a server holds, by the names requests use: attached at start-up, loaded on
demand (`allow_pull`), evicted least-recently-used beyond `max_adapters` or beyond `max_bytes`
of adapter memory (weights, LayerNorm deltas, heads; the base is not counted), reloaded when
asked for again.

A request pins its adapter's slot from `acquire` to `release`, so an adapter is never detached
under a request queued for it (the pool may run over `max_adapters` for a moment instead).
Concurrent first requests for one adapter share one load (`fetch`). Every load goes through
`Engine.attach`: signature, digests and base hash are checked before any weight is read.

Two composed adapters needing two versions of one component's name take turns: the one
attached is detached to let the other in once its requests are answered (`_displace`). While
the other waits (up to `yield_s`, then it is told to retry: `Turn`, HTTP 503) the holder takes
no new request, so steady traffic to it cannot starve the other; its new requests wait in
turn (`Service`). An adapter loaded for requests has a turn of at least `TURN_S` before it is
asked to make way, so two sides in steady use share the time, without a switch per request.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable

from hubcli.errors import AdapterError, ComponentNameTaken, UsageError
from hubcli.fsutil import expanded, is_dir, spelt_as_path
from hubcli.format.vocab import ADAPTER_REF, BASE
from hubcli.serving.batcher import Busy
from hubcli.serving.engine import Engine

# how long an adapter waits for another to make way for its component's name (the other
# taking no new request meanwhile) before its request is told to retry
YIELD_S = 5.0
# the least time an adapter loaded for requests serves before it makes way for another
TURN_S = 0.5
# how often a wait for a turn looks again (a turn running out tells no one)
TURN_POLL_S = 0.02


class NotServed(AdapterError):
    """A request names an adapter this server does not hold and may not load."""


class AlreadyServed(AdapterError):
    """An adapter of that name is attached already."""

    hint = "each adapter is named once"


class Turn(Busy):
    """An adapter waits its turn for a component's name that another version's adapter holds
    for requests under way (HTTP 503 with Retry-After, once the wait is over)."""


class InUse(AdapterError):
    """An adapter cannot be unloaded while requests for it are waiting."""

    hint = "retry when its requests are answered"


@dataclass(frozen=True)
class Served:
    """An attached adapter: the name requests use, its slot and its manifest."""

    name: str
    slot: str
    manifest: dict
    holdings: dict[str, int]  # bytes by what holds them (`Engine.holdings`)
    components: tuple[str, ...]  # what it attaches as well, as each loads (`Engine.requires`)

    @property
    def nbytes(self) -> int:
        """Memory it holds, its components' included."""
        return sum(self.holdings.values())

    def describe(self) -> dict:
        return {"name": self.name, "adapter": self.manifest["name"],
                "version": self.manifest.get("version"), "task": self.manifest["task"],
                "bytes": self.nbytes}


def public_name(ref: str) -> str:
    """The name requests use: a registry reference without its version, else as given."""
    if is_registry_ref(ref):
        return ref.partition("@")[0]
    return ref


def is_registry_ref(ref: str) -> bool:
    return not spelt_as_path(ref) and not is_dir(ref) \
        and bool(ADAPTER_REF.match(ref))


class Pool:
    """The adapters of one engine by name. `events(kind, name)` hears "hit", "load" and
    "evict"."""

    def __init__(self, engine: Engine, *, max_adapters: int | None = None,
                 max_bytes: int | None = None, allow_pull: bool = False,
                 yield_s: float = YIELD_S,
                 notify: Callable[[str], None] = lambda _m: None,
                 events: Callable[[str, str], None] = lambda _k, _n: None) -> None:
        self.engine = engine
        self.max_adapters = max_adapters
        self.max_bytes = max_bytes
        self.allow_pull = allow_pull
        self.yield_s = yield_s
        self.notify = notify
        self.events = events
        self._served: OrderedDict[str, Served] = OrderedDict()  # least recently used first
        self._refs: dict[str, str] = {}        # a name as typed (with @version) -> its name
        self._sources: dict[str, str] = {}     # name -> what to load it from again
        self._pins: dict[str, int] = {}        # slot -> requests holding it
        self._loading: dict[str, Future] = {}
        self._displaced: set[str] = set()  # detached for another version of a component
        # name -> (until, who waits, component): it makes way, taking no new request (`_displace`)
        self._yielding: dict[str, tuple[float, str, str]] = {}
        self._turns: dict[str, float] = {}  # name -> until: loaded for requests, its turn
        self._meta = threading.Lock()
        self._unpinned = threading.Condition(self._meta)  # an adapter's last request left

    @classmethod
    def for_adapters(cls, refs: list[str], *, base: str | None = None, device: str = "cpu",
                     allow_unsigned: bool = False, allow_base_mismatch: bool = False,
                     notify: Callable[[str], None] = lambda _m: None, **options) -> Pool:
        """A pool on `base` (default: the base the first adapter was trained on, else the
        packaged one), on `device`, with every adapter in `refs` attached (`BASE` needs none).

        Raises:
            as `add`.
        """
        from hubcli.format import manifest as manifest_io
        from hubcli.local.attach import base_for
        from hubcli.remote.refs import resolve_adapter

        refs = [r for r in refs if r != BASE]
        if refs:
            base = base_for(manifest_io.read(resolve_adapter(refs[0], notify=notify)), base)
        engine = Engine(base, device=device, allow_unsigned=allow_unsigned,
                        allow_base_mismatch=allow_base_mismatch, notify=notify)
        pool = cls(engine, notify=notify, **options)
        for ref in refs:
            pool.add(ref)
        listed = pool.listing()
        if dropped := [n for n in dict.fromkeys(map(public_name, refs))
                       if n not in listed and n not in pool._displaced]:  # those said so
            notify(f"warning: {', '.join(dropped)} did not fit {pool.limits()}: detached "
                   "at start-up, each loaded again on its first request")
        return pool

    def limits(self) -> str:
        """The pool's limits, as people read them: '1 adapter', '10.0 MB', or both."""
        said = []
        if self.max_adapters is not None:
            said.append(f"{self.max_adapters} adapter{'s' if self.max_adapters != 1 else ''}")
        if self.max_bytes is not None:
            said.append(f"{self.max_bytes / 2**20:.1f} MB")
        return " and ".join(said) or "no limit"

    def add(self, ref: str, *, fresh: bool = False) -> Served:
        """Pull (a registry reference, when not pulled yet), verify and attach `ref`; `fresh`:
        loaded for requests, which have a turn of `TURN_S` before it makes way for another.

        Raises:
            AlreadyServed (`BASE` too); UsageError (also a blank `ref`); RegistryError,
            SignatureError, BundleError, ManifestError, BaseMismatchError, AdapterError from
            loading; Turn: another version of a component is held for requests under way
            for longer than `yield_s` (`_attach`).
        """
        from hubcli.remote.refs import resolve_adapter

        if not ref.strip():  # as a folder, the server's working one
            raise UsageError("the adapter to load is blank",
                             hint="name a folder or NS/NAME[@VERSION]")
        if ref == BASE:
            raise AlreadyServed(f"{BASE} is the untouched base: it is always served",
                                hint=f'predict with it: {{"adapter": "{BASE}", "inputs": [...]}}')
        name = public_name(self._refs.get(ref, ref))
        if name in self._served:
            raise AlreadyServed(f"{name!r} is served already")
        if same := self._same_folder(ref, name):  # another spelling of a folder served
            raise AlreadyServed(f"{ref} is served already, as {same!r}")
        source = self._sources.get(name, ref)
        folder = resolve_adapter(source, notify=self.notify)
        slot = self._attach(folder, name)
        served = Served(name, slot, self.engine.manifest(slot), self.engine.holdings(slot),
                        self.engine.requires(slot))
        if self.max_bytes is not None and served.nbytes > self.max_bytes:
            self.notify(f"warning: {name} holds {served.nbytes / 2**20:.1f} MB, more than "
                        f"{self.limits()} on its own: it is detached after each request "
                        "for it, and loaded again for the next")
        with self._meta:
            self._served[name] = served
            self._sources[name] = source
            self._refs[ref] = name
            self._displaced.discard(name)
            self._yielding.pop(name, None)
            if fresh:
                self._turns[name] = time.monotonic() + TURN_S
            else:
                self._turns.pop(name, None)
        self.events("load", name)
        self._evict(keep=name)
        return served

    def acquire(self, name: str) -> str | None:
        """The slot serving `name`, pinned until `release` (`BASE` for the base); None when
        it is not attached but may be loaded (`fetch` it, then acquire again).

        Raises:
            NotServed: not attached and not loadable. Turn: it makes way for an adapter
                needing another version of one of its components (`_displace`).
        """
        if name == BASE:
            return BASE
        with self._meta:
            served = self._served.get(self._refs.get(name, name))
            if served is not None:
                self._check_turn(served.name)
                self._served.move_to_end(served.name)
                self._pins[served.slot] = self._pins.get(served.slot, 0) + 1
        if served is not None:
            self.events("hit", served.name)
            return served.slot
        if self._loadable(name):
            return None
        raise NotServed(f"no adapter named {name!r} is served",
                        hint=f"served: {', '.join([BASE, *self.names()])}"
                             + ("" if self.allow_pull else "; start with --allow-pull to load "
                                                            "registry adapters on demand"))

    def release(self, slot: str) -> None:
        if slot == BASE:
            return
        with self._meta:
            self._pins[slot] -= 1
            if not self._pins[slot]:
                del self._pins[slot]
                self._unpinned.notify_all()
        self._evict()

    def fetch(self, name: str, *, reload: bool = False) -> Future:
        """A future of `name` being attached: the one load under way for it, or a new one
        (in its own thread); `reload`: for a request, only while `name` is served (an
        unload between the request's `acquire` and this would be undone)."""
        key = public_name(self._refs.get(name, name))  # NS/NAME and NS/NAME@V: one load
        with self._meta:
            future = self._loading.get(key)
            if future is not None:
                return future
            future = Future()
            if reload and not self._loadable(name):
                future.set_exception(NotServed(f"no adapter named {name!r} is served",
                                               hint="it was unloaded just now"))
                return future
            self._loading[key] = future
        threading.Thread(target=self._load, args=(name, key, future), daemon=True,
                         name=f"hub-serve-load-{key}").start()
        return future

    def remove(self, name: str) -> None:
        """Stop serving `name`, attached or evicted (loaded again on its next request until
        now): it is loaded again on demand only as any registry adapter is.

        Raises:
            NotServed: no such adapter is served (`BASE` is not one: it stays). InUse:
                requests for it are waiting, or it is being loaded for one.
        """
        if name == BASE:
            raise NotServed(f"{BASE} is the untouched base, not an adapter: it cannot be "
                            "unloaded", hint="unload an adapter by its name in GET /v1/adapters")
        with self._meta:
            key = public_name(self._refs.get(name, name))
            served = self._served.get(key)
            if key in self._loading:  # its load would put it back
                raise InUse(f"{key!r} is being loaded for a request")
            if served is None and key not in self._sources:
                raise NotServed(f"no adapter named {name!r} is served",
                                hint=f"served: {', '.join(sorted(self._sources)) or 'none'}")
            if served is not None and served.slot in self._pins:
                raise InUse(f"{served.name!r} has requests waiting")
            self._served.pop(key, None)
            self._displaced.discard(key)
            self._yielding.pop(key, None)
            self._turns.pop(key, None)
            del self._sources[key]  # unloaded on purpose: no reload on demand
            self._refs = {r: n for r, n in self._refs.items() if n != key}
        if served is not None:
            self.engine.detach(served.slot)

    def names(self) -> list[str]:
        """Every adapter served, in name order: attached, or evicted and loaded again on its
        next request."""
        with self._meta:
            return sorted(self._sources)

    def evicted(self) -> list[str]:
        """The adapters served but not attached now (each loaded again on its next request)."""
        with self._meta:
            return sorted(n for n in self._sources if n not in self._served)

    def listing(self) -> dict[str, dict]:
        """{name: description} of every attached adapter, the base first."""
        base = {BASE: {"name": BASE, "adapter": None, "version": None, "task": "embedding",
                       "bytes": 0}}
        with self._meta:
            return base | {n: s.describe() for n, s in self._served.items()}

    def __len__(self) -> int:
        return len(self._served)

    def nbytes(self) -> int:
        """Memory the attached adapters hold together, a component they share once."""
        return _held(self._served.values())

    def _same_folder(self, ref: str, name: str) -> str | None:
        """The other name a folder is served under (attached, or evicted and loaded again on
        demand), where `ref` (to be served as `name`) is that folder by another spelling
        (./ner-adapter and /home/me/ner-adapter)."""
        if is_registry_ref(ref) or not is_dir(ref):
            return None
        here = expanded(ref).resolve()
        with self._meta:
            return next((n for n, src in self._sources.items() if n != name
                         and not is_registry_ref(src) and expanded(src).resolve()
                         == here), None)

    def _check_turn(self, name: str) -> None:
        """Under `_meta`. Raises Turn: `name` makes way for another adapter (`_displace`)."""
        if name not in self._yielding:
            return
        until, waiting, component = self._yielding[name]
        if time.monotonic() >= until:  # the other gave up waiting
            del self._yielding[name]
            return
        raise Turn(f"{name} makes way for {waiting}, which needs another version of its "
                   f"component {component}: its turn comes next")

    def _loadable(self, name: str) -> bool:
        return public_name(name) in self._sources or (self.allow_pull and is_registry_ref(name))

    def _load(self, name: str, key: str, future: Future) -> None:
        try:
            future.set_result(self.add(name, fresh=True).slot)
        except Exception as err:  # the waiting requests answer with it
            future.set_exception(err)
        finally:
            with self._meta:
                del self._loading[key]

    def _attach(self, folder, name: str) -> str:
        """`engine.attach(folder)`, detaching the adapters that hold other versions of its
        components (`_displace`) as their requests are answered, for up to `yield_s`.

        Raises:
            Turn: a component still held past that.
        """
        deadline = time.monotonic() + self.yield_s
        while True:
            try:
                return self.engine.attach(folder)
            except ComponentNameTaken as err:
                self._displace(err.component, name, deadline)

    def _displace(self, component: str, name: str, deadline: float) -> None:
        """Detach the served adapters that hold another version of `component`, which `name`
        needs, once their turns are over and their requests answered, each taking no new
        request from the end of its turn (each is loaded again on its next request, and
        displaces `name` in turn). Where none is served, the holder is being attached or
        detached: wait a moment (the caller tries again).

        Raises:
            Turn: `deadline` passed first.
        """
        with self._unpinned:
            while True:
                holders = [s for s in self._served.values() if component in s.components]
                now = time.monotonic()
                in_turn = [s.name for s in holders if self._turns.get(s.name, 0.0) > now]
                pinned = [s.name for s in holders if s.slot in self._pins]
                if holders and not in_turn and not pinned:
                    break
                left = deadline - now
                if left <= 0:
                    raise _waiting(name, component, (in_turn + pinned)[0] if holders
                                   else "an adapter loading or unloading")
                self._yielding.update({p: (deadline, name, component) for p in pinned
                                       if p not in in_turn})
                self._unpinned.wait(min(left, TURN_POLL_S))
                if not holders:
                    return
            for s in holders:
                del self._served[s.name]
                self._displaced.add(s.name)
        for s in holders:
            self.engine.detach(s.slot)
            self.events("evict", s.name)
            self.notify(f"notice: {s.name} detached: {name} needs another version of its "
                        f"component {component}; each is loaded again on its next request")

    def _evict(self, keep: str | None = None) -> None:
        """Detach adapters (`_victim`) while more than `max_adapters` are attached or they
        hold more than `max_bytes`."""
        while True:
            with self._meta:
                victim = self._victim(keep)
                if victim is None:
                    return
                del self._served[victim.name]
            self.engine.detach(victim.slot)
            self.events("evict", victim.name)

    def _victim(self, keep: str | None) -> Served | None:
        """The adapter to detach next, neither `keep` nor pinned: over `max_adapters`, the
        least recently used; over `max_bytes`, one that holds more on its own first, and
        while such a one is kept or pinned, the least recently used of the others only
        while they hold more without it (it would not fit with or without them)."""
        idle = [s for s in self._served.values() if s.slot not in self._pins and s.name != keep]
        if self.max_adapters is not None and len(self._served) > self.max_adapters:
            return next(iter(idle), None)
        if self.max_bytes is None:
            return None
        too_big = {s.name for s in self._served.values() if s.nbytes > self.max_bytes}
        if victim := next((s for s in idle if s.name in too_big), None):
            return victim
        rest = [s for s in self._served.values() if s.name not in too_big]
        if _held(rest) <= self.max_bytes:
            return None
        return next((s for s in idle if s.name not in too_big), None)


def _held(served) -> int:
    """Memory `served` adapters hold together, a component they share once."""
    return sum({n: b for s in served for n, b in s.holdings.items()}.values())


def _waiting(name: str, component: str, holder: str) -> Turn:
    """A load to retry: `name` needs another version of `component`, which `holder` holds."""
    return Turn(f"{name} needs another version of its component {component}, which {holder} "
                "holds for requests under way")
