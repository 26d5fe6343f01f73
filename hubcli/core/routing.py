"""Per-sample routing: one forward pass where row i runs through adapter k_i, or none.

The batch is sorted by adapter once, before the encoder (`Route.sort`), so that every adapter's
rows form one contiguous segment; every site then applies each adapter to its own segment, a
slice of the activations that costs no copy, and joins the pieces once. This is the segmented
form Punica's SGMV kernel uses for LoRA: the work is what one adapter would cost on those
rows, with no per-row weight gathers and no pass of the encoder per adapter. The outputs are
put back in the caller's row order after the encoder (`Route.unsort`).

An encoder that packs a padded batch's real tokens into one [tokens, d] matrix (`bert.Packing`)
keeps them row by row, so each segment is a contiguous range of tokens too; given the rows'
lengths, the route maps its segments onto those ranges wherever a site sees 2-D activations.

That is the least arithmetic, and what a CPU wants. A GPU wants the fewest kernel launches:
at a batch this size a pass there is bound by them, and the segmented form launches each
site's kernels once per adapter. A route made with `gather` carries each row's slot (its
adapter's place in `numbering`, 0 for the base) instead, and a site runs every adapter at
once over their stacked weights, keeping each row's own (`gathered.py`): a constant number of
launches, whatever the number of adapters, for some wasted arithmetic. The model numbers all
the adapters loaded, not only the batch's (up to `gathered.NUMBERED` of them): batches mixing
different ones then find the same stacks at every site they use most of the adapters of,
where numbering only a batch's own, each new mix of a server's traffic would rebuild them all.

`BASE` rows, and rows whose adapter has nothing at a site, keep exactly what the frozen base
computed there, so they stay bit-identical to the base on the batch in the route's order. (In
the caller's order a row may sit elsewhere in the batch, and a CPU's matrix products are not
always bit for bit the same for a row at another place: 1-3 units in the last place, on a few
rows in a hundred mixes.)

The sites of a model read the route from one holder the model sets once per pass (`Routes`),
per thread, so two threads can run routed passes over one model at once, each with its own
batch (`hub serve --workers`).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

import torch

from hubcli.core.composition import Block, members, owner
from hubcli.core.names import module_key
from hubcli.format.vocab import BASE

__all__ = ["BASE", "PerThread", "Route", "Routes", "Segment"]

# (adapter name, or None for the untouched base; first row; one past the last row)
Segment = tuple[str | None, int, int]


@dataclass(frozen=True)
class Route:
    """Which adapter each row of a batch uses, with the rows sorted into one segment each."""

    names: tuple[str, ...]
    segments: tuple[Segment, ...]  # in the sorted order, covering the batch
    order: torch.Tensor            # [batch] long: sorted position -> the caller's row
    rows: tuple[int, ...]          # the same on the host, read without waiting on a GPU
    token_segments: tuple[Segment, ...] | None = None  # the same, in packed tokens
    # with `gather`: [rows] each sorted row's slot (0: the base, k + 1: numbering[k]);
    # [tokens] the same for packed tokens
    slots: torch.Tensor | None = None
    token_slots: torch.Tensor | None = None
    numbering: tuple[str, ...] = ()  # the adapters slots number: `single`, or more
    # the composed adapters among `names` (a fusion, a stack): their blocks, which their
    # segments run through, after the single adapters' (gathered: their slot is 0, the base's)
    blocks: dict[str, Block] = field(default_factory=dict, compare=False)
    # what the sites of one pass can share (a gathered layout's mask), built by the first
    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    @cached_property  # asked at every site of a gathered pass
    def single(self) -> tuple[str, ...]:
        """`names` but the composed: the adapters a gathered site stacks."""
        return tuple(n for n in self.names if n not in self.blocks)

    @cached_property  # asked at every site of a gathered pass
    def keys(self) -> frozenset[str]:
        """The module keys of `single` (`hubcli.core.names.module_key`), for
        `AdapterTable.count_of`."""
        return frozenset(map(module_key, self.single))

    @cached_property  # asked at every LayerNorm site of a pass
    def owners(self) -> dict[str, str]:
        """Each composed adapter's owner (`composition.owner`): whose head and LayerNorm
        deltas its rows use."""
        return {n: owner(b) for n, b in self.blocks.items()}

    @cached_property  # asked at every site of a pass, for each composed adapter
    def parts(self) -> dict[str, tuple[list[str], list[str]]]:
        """Each composed adapter's (adapters, fusions) (`composition.members`)."""
        return {n: members(b) for n, b in self.blocks.items()}

    def owner_of(self, name: str | None) -> str | None:
        """Whose head and LayerNorm deltas the rows of `name` use: its own, or its block's
        owner for a composed adapter."""
        return self.owners.get(name, name)

    @classmethod
    def of(cls, per_row: list[str | None], device: torch.device | None = None,
           lengths: list[int] | None = None, gather: bool = False,
           numbering: tuple[str, ...] | None = None,
           blocks: dict[str, Block] | None = None) -> Route:
        """A route from one adapter name per row (`BASE` or None: the untouched base);
        `lengths`, each row's real tokens, for an encoder that packs them; `gather`: sites
        run all the adapters at once over stacked weights (`gathered.py`), the slots
        numbering the adapters of `numbering` (by default the batch's single ones, in name
        order); `blocks`: the block of each composed adapter among the rows' (gathered, its
        rows' slot is 0: a site stacks single adapters).

        Raises:
            ValueError: a row's single adapter that `numbering` leaves out.
        """
        blocks = dict(blocks or {})
        # in name order: the same adapters in any row order make the same route's slots, so
        # a gathered site's stacks for them are built once (gathered.StackCache)
        names = tuple(sorted({n for n in per_row if n not in (None, BASE)}))
        numbering = (tuple(n for n in names if n not in blocks) if numbering is None
                     else tuple(numbering))
        groups: dict[str | None, list[int]] = {None: []}
        groups.update({n: [] for n in names})
        for row, n in enumerate(per_row):
            groups[None if n in (None, BASE) else n].append(row)
        segments, start = [], 0
        for n, rows in groups.items():
            if rows:
                segments.append((n, start, start + len(rows)))
                start += len(rows)
        order = [row for rows in groups.values() for row in rows]
        tokens = None
        if lengths is not None:
            offsets = [0]
            for row in order:
                offsets.append(offsets[-1] + lengths[row])
            tokens = tuple((n, offsets[s], offsets[e]) for n, s, e in segments)
        index = list(order)  # the row order and any slots, copied to the device at once
        if gather:  # each segment's slot, once per row (and once per token)
            slot = {None: 0, **{n: k + 1 for k, n in enumerate(numbering)},
                    **dict.fromkeys(blocks, 0)}
            if missing := [n for n in names if n not in slot]:
                raise ValueError(f"the numbering leaves out {', '.join(missing)}")
            for spans in (segments, tokens or ()):
                for n, s, e in spans:
                    index += [slot[n]] * (e - s)
        on_device = torch.tensor(index, dtype=torch.long, device=device)
        b = len(order)
        slots = on_device[b:2 * b] if gather else None
        token_slots = on_device[2 * b:] if gather and tokens is not None else None
        return cls(names, tuple(segments), on_device[:b], tuple(order), tokens, slots,
                   token_slots, numbering if gather else (), blocks)

    def sort(self, t: torch.Tensor) -> torch.Tensor:
        """The caller's batch in routed order."""
        return t.index_select(0, self.order)

    def unsort(self, t: torch.Tensor) -> torch.Tensor:
        """A routed-order batch back in the caller's row order."""
        return torch.empty_like(t).index_copy_(0, self.order, t)

    def memo(self, key: tuple, make: Callable[[], Any]) -> Any:
        """`make()`, once per route for `key`: what several sites of one pass compute alike."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def gathering(self) -> bool:
        """True when a site runs this route gathered: it carries slots, and no gradients are
        recorded (the stacks are for inference)."""
        return self.slots is not None and not torch.is_grad_enabled()

    @property
    def has_base(self) -> bool:
        """True when some rows take the base's output at a gathered site: the untouched
        base's, and a composed adapter's (its block runs on that after)."""
        return self.segments[0][0] is None or bool(self.blocks)

    def slot_index(self, y: torch.Tensor) -> torch.Tensor:
        """Each row's slot (gathered route), shaped to index per-slot tensors for `y`: [rows,
        1] for [rows, n, d], [tokens] for a packed [tokens, d].

        Raises:
            ValueError: the route was made without `gather`, or packed activations and no
                `lengths`.
        """
        slots = self.token_slots if y.dim() == 2 else self.slots
        if slots is None:
            raise ValueError("a gathered site needs a route made with gather=True (and the "
                             "rows' lengths for packed activations)")
        return slots if y.dim() == 2 else slots.view(-1, *(1,) * (y.dim() - 2))

    def rows_of(self, name: str) -> tuple[int, int, list[int]]:
        """(first, end) of `name`'s segment in routed order and its rows in the caller's order."""
        for n, start, end in self.segments:
            if n == name:
                return start, end, list(self.rows[start:end])
        return 0, 0, []

    def apply(self, y: torch.Tensor, has: Callable[[str], bool],
              run: Callable[[str, int, int], torch.Tensor]) -> torch.Tensor:
        """`y` with each segment whose adapter `has` something here replaced by `run(name,
        start, end)`; `y` itself (not a copy) when no segment changes. Segments are rows of a
        [rows, n, d] `y`, token ranges of a packed [tokens, d] one.

        Raises:
            ValueError: packed activations, but the route was made without `lengths`.
        """
        segments = self._spans(y)
        if not any(n is not None and has(n) for n, _, _ in segments):
            return y
        if len(segments) == 1:  # one adapter's rows only: nothing to join
            return run(*segments[0])
        return torch.cat([run(n, s, e) if n is not None and has(n) else y[s:e]
                          for n, s, e in segments])

    def overwrite(self, out: torch.Tensor, has: Callable[[str], bool],
                  run: Callable[[str, int, int], torch.Tensor]) -> torch.Tensor:
        """`out`, a site's own result outside autograd, with each segment of a composed
        adapter that `has` something here written over by `run(name, start, end)`, in place:
        the few rows a gathered site leaves to their blocks, with no copy of the others.

        Raises:
            ValueError: as `apply`.
        """
        for n, s, e in self._spans(out):
            if n in self.blocks and has(n):
                out[s:e] = run(n, s, e)
        return out

    def _spans(self, y: torch.Tensor) -> tuple[Segment, ...]:
        """The segments as rows of a [rows, n, d] `y`, or as token ranges of a packed
        [tokens, d] one.

        Raises:
            ValueError: packed activations, but the route was made without `lengths`."""
        if y.dim() != 2:
            return self.segments
        if self.token_segments is None:
            raise ValueError("packed activations need a route made with the rows' lengths")
        return self.token_segments


class Routes(threading.local):
    """The route of the pass a thread is running, for every site of one model to read (None
    outside a routed pass): set once per pass, not once per site. A copy (deepcopy, pickle)
    is a new holder with none set, shared by the copied sites as the original is."""

    route: Route | None = None

    def __reduce__(self) -> tuple:
        return Routes, ()


class PerThread:
    """A class attribute whose value each thread sets and reads on its own, per instance
    (None until set): the sublayer input a site keeps, so concurrent passes never see each
    other's. Values live beside the instances, not in them, so a deep copy starts with none."""

    def __init__(self) -> None:
        self._locals: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def _local(self, obj: Any) -> threading.local:
        local = self._locals.get(obj)
        if local is None:
            with self._lock:  # two threads reaching here at once must share one
                local = self._locals.setdefault(obj, threading.local())
        return local

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(self._local(obj), "value", None)

    def __set__(self, obj: Any, value: Any) -> None:
        self._local(obj).value = value
