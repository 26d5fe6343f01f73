"""The forward passes that mix adapters: rows routed to their own adapters in one pass
(`forward_routed`), and one input through several adapters at once (`forward_parallel`).

`RoutedPasses` is a mixin of `AdapterModel`: it reads the model's sites, heads and adapter
table, and sets a `Route` for every site to read for the length of a pass (`routing`).
Whether a pass gathers (every site runs all its adapters at once over stacked weights: a
GPU's way) or runs each adapter on its own rows (a CPU's) is the model's `gather` switch
(`gathers`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Iterator

import torch

from hubcli.core import gathered
from hubcli.core.bert import CompactBert
from hubcli.core.composition import Fuse, Parallel, members, owner
from hubcli.core.config import PLACEMENTS
from hubcli.core.heads import routed_heads
from hubcli.core.routing import BASE, Route
from hubcli.errors import AdapterError
from hubcli.format.spec import EXTRA_LAYERNORMS


class RoutedPasses:
    """Routed and Parallel passes over an `AdapterModel`: they read its `encoder`,
    `num_layers`, `adapter_sites`, `layernorm_sites`, `routes` (the holder its sites read),
    `heads` (and their stacks, `_stacks`), `_routable` (`routable`, kept),
    `infos`, `compositions` and `gather`, and call its `_require`, `_require_block`,
    `block_of` and `encode`."""

    @contextmanager
    def routing(self, per_row: list[str | None], attention_mask: torch.Tensor | None = None,
                shared: bool = True) -> Iterator[Route]:
        """Within the block, every site routes row i of the batch to adapter `per_row[i]`
        (`BASE` or None: the untouched base), whatever is active. The batch must be in the
        route's order: `route.sort` it before the encoder and `route.unsort` what comes out.
        `attention_mask` (the caller's order) lets the route follow an encoder that packs
        the real tokens. Gathered, the route numbers every adapter loaded (`shared`: stacks
        any mix of them shares, for a server's traffic; up to `gathered.NUMBERED` of them),
        or only the batch's (a Parallel block, which runs again as it is: no more arithmetic
        than its own).

        A composed adapter's rows (a fusion's or a stack's, by its name) run through its
        block at every site, with its owner's LayerNorm deltas, as `activate` runs it for a
        whole batch: by segments, after the single adapters' rows (gathered: over the stacks,
        which hold single adapters only; its rows there are the base's).

        Raises:
            AdapterError: a name that is not loaded, a composition whose parts are not, or
                not one name per row of `attention_mask`.
        """
        if attention_mask is not None and len(per_row) != len(attention_mask):
            raise AdapterError(f"{len(per_row)} adapter names for a batch of "
                               f"{len(attention_mask)} rows",
                               hint=f"give one name per row ({BASE} or None: the base)")
        names = {n for n in per_row if n not in (None, BASE)}
        blocks = {}
        for n in names:
            block = self.block_of(n)
            if not isinstance(block, str):
                self._require_block(block)
                blocks[n] = block
        ref = self.encoder.get_input_embeddings().weight
        lengths = None if attention_mask is None else attention_mask.sum(1).tolist()
        gather = self.gathers()
        numbering = self.numbering(names - blocks.keys()) if gather and shared else None
        route = Route.of(per_row, ref.device, lengths, gather, numbering, blocks)
        self.routes.route = route  # what every site reads
        try:
            yield route
        finally:
            self.routes.route = None

    def routable(self) -> tuple[str, ...]:
        """The single adapters loaded (fusions and stacks left out: a gathered site stacks
        single adapters, composed rows run on after), in name order: what gathered routes
        number. Kept until the model's adapters change (`_renumber`)."""
        if self._routable is None:
            self._routable = tuple(sorted(
                n for n, info in self.infos.items()
                if not isinstance(info.config, Fuse) and n not in self.compositions))
        return self._routable

    def numbering(self, names: set[str]) -> tuple[str, ...] | None:
        """What a gathered route for a batch of `names` numbers, so that its stacks serve any
        mix: every routable adapter, or None (the batch's own) past `gathered.NUMBERED`."""
        routable = self.routable()
        if not names.issubset(routable):  # the tables were edited behind the model's back
            self._renumber()
            routable = self.routable()
        return routable if len(routable) <= gathered.NUMBERED else None

    def gathers(self) -> bool:
        """Whether routed passes gather (`self.gather`; by default, off the CPU)."""
        if self.gather is not None:
            return self.gather
        return self.encoder.get_input_embeddings().weight.device.type != "cpu"

    def forward_parallel(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         token_type_ids: torch.Tensor | None, block: Parallel,
                         logits_to: torch.device | str | None = None
                         ) -> dict[str, torch.Tensor]:
        """Every adapter of `block` on the same batch: {name: its head's logits, moved to
        `logits_to` if given, in one copy per head or per stack of heads}. The layers
        below the first where any of them acts (AdapterDrop's adapters leave the lowest out)
        run once, as the base. From there the adapters continue as one routed batch of k
        copies where the model `gathers()` (a GPU, where a pass of a batch this size is
        bound by kernel launches, not arithmetic), else each on its own: on the CPU the
        batch of copies measured slower than separate passes (0.88x,
        `benchmarks/bench_routing.py`), its k-times larger activations outgrowing the
        buffers the allocator reuses.

        A composed adapter (a fusion's or a stack's name) is one of them, its copy through
        its block (see `routing`).

        Raises:
            AdapterError: a name that is not loaded, or one without a head.
        """
        names = list(dict.fromkeys(block.children))  # a name given twice runs once
        for n in names:
            if not self.has_head(n):
                raise AdapterError(f"adapter {n!r} has no head")
        batched = self.gathers()
        b = len(input_ids)
        split = self.first_layer_acting(names)
        shared = None
        if split is not None and isinstance(self.encoder, CompactBert):
            with self.routing([BASE] * b, attention_mask):
                shared = self.encoder.run(self.encoder.embed(input_ids, attention_mask,
                                                             token_type_ids), 0, split)
        out = {}
        # batched, the copies follow one another in name order, the order a route keeps
        for group in [sorted(names)] if batched else [[n] for n in names]:
            k = len(group)
            mask = attention_mask.repeat(k, 1)
            with self.routing([n for n in group for _ in range(b)], mask,
                              shared=False) as route:
                if shared is None:
                    types = None if token_type_ids is None else token_type_ids.repeat(k, 1)
                    hidden = self.encode(input_ids.repeat(k, 1), mask, types)
                else:
                    hidden = self.encoder.run(shared.repeat(k) if k > 1 else shared,
                                              split).padded()
            out.update(routed_heads(self.heads, [(n, j * b, (j + 1) * b) for j, n in
                                                 enumerate(group)], hidden, mask,
                                    self._stacks, logits_to, route=route))
        return out

    def has_head(self, name: str) -> bool:
        """Whether adapter `name` (a composed one: its owner) has a head.

        Raises:
            AdapterError: nothing of that name is loaded."""
        return owner(self.block_of(name)) in self.heads

    def first_layer_acting(self, names: Iterable[str]) -> int | None:
        """The lowest layer where any of `names` (a composed one: its block's adapters,
        fusions and owner) has an adapter, a fusion or a LayerNorm delta (the number of
        layers where none has); None where one has deltas on the embeddings' LayerNorm.
        Below it they all compute what the base computes.

        Raises:
            AdapterError: a name that is not loaded."""
        parts: set[str] = set()
        for block in map(self.block_of, names):
            adapters, fusions = members(block)
            parts.update(adapters, fusions, [owner(block)])
        if any(parts & set(self.layernorm_sites[e].deltas) for e in EXTRA_LAYERNORMS):
            return None
        acting = [i for (i, _), site in self.adapter_sites.items()
                  if parts & {*site.adapters, *site.fusions}]
        acting += [i for i in range(self.num_layers) for p in PLACEMENTS
                   if parts & set(self.layernorm_sites[f"layers.{i}.{p}"].deltas)]
        return min(acting, default=self.num_layers)

    def forward_routed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       token_type_ids: torch.Tensor | None, per_row: list[str | None],
                       logits_to: torch.device | str | None = None
                       ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """One pass with a different adapter per row (a composed one too, by its name: see
        `routing`): (hidden states, per-row logits of that row's head, None for `BASE` rows
        and adapters without a head), in the caller's row order. Each head runs on its own
        rows (gathered, heads of one kind as one stack: `heads.routed_heads`); `logits_to`:
        their outputs moved there (the CPU, from a GPU) in one copy per head or stack before
        they are split into rows.

        Raises:
            AdapterError: a name that is not loaded, or not one name per row.
        """
        with self.routing(per_row, attention_mask) as route:
            mask = route.sort(attention_mask)
            hidden = self.encode(route.sort(input_ids), mask,
                                 None if token_type_ids is None else route.sort(token_type_ids))
        logits: list[torch.Tensor | None] = [None] * len(per_row)
        outs = routed_heads(self.heads, [g for g in route.segments
                                         if route.owner_of(g[0]) in self.heads],
                            hidden, mask, self._stacks, logits_to, route=route)
        for name, out in outs.items():
            for r, row in zip(route.rows_of(name)[2], out.unbind(0)):
                logits[r] = row
        return route.unsort(hidden), logits
