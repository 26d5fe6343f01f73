"""Per-sample routing: one forward pass where row i runs through adapter k_i, or none.

The model hands every site a `Route` (the K distinct adapter names of the batch and, per row,
the position of its adapter in that list, -1 for `BASE`). Each site then
- looks up its stacked weights for those K names (built once per name set, rebuilt only when
  a weight changed: `StackCache`), K along the first dimension;
- gathers one weight matrix per routed row and applies them all with one batched matrix
  product (`torch.baddbmm`), as Punica's and S-LoRA's kernels do for LoRA;
- leaves `BASE` rows, and rows whose adapter has nothing at this site, exactly as the frozen
  base computed them (they are never written), so they stay bit-identical to the base.

Adapters of different widths at one site are zero-padded to the widest before stacking: a zero
down-projection column feeds act(0) = 0 (true for every activation offered) into a zero
up-projection row, so padding adds exact zeros.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

BASE = "__base__"


@dataclass(frozen=True)
class Route:
    """Which adapter each row of a batch uses."""

    names: tuple[str, ...]
    index: torch.Tensor  # [batch] long, position in `names`, -1 for BASE

    @classmethod
    def of(cls, per_row: list[str | None], device: torch.device | None = None) -> Route:
        """A route from one adapter name per row (`BASE` or None: the untouched base)."""
        names = tuple(dict.fromkeys(n for n in per_row if n not in (None, BASE)))
        pos = {n: k for k, n in enumerate(names)}
        index = torch.tensor([pos.get(n, -1) for n in per_row], dtype=torch.long, device=device)
        return cls(names, index)


@dataclass(frozen=True)
class Stacked:
    """One site's weights for all its adapters of one kind, stacked along a first dimension;
    `slot[name]` is that adapter's position."""

    slot: dict[str, int]
    tensors: tuple[torch.Tensor, ...]

    def rows(self, route: Route) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(rows of the batch this site changes, their slot in `tensors`), or None for none."""
        slot_of = [self.slot.get(n, -1) for n in route.names]
        if all(s < 0 for s in slot_of):
            return None
        slot_of = torch.tensor(slot_of, dtype=torch.long, device=route.index.device)
        slots = torch.where(route.index >= 0, slot_of[route.index.clamp(min=0)], -1)
        rows = (slots >= 0).nonzero().squeeze(1)
        if rows.numel() == 0:
            return None
        return rows, slots[rows]


class StackCache:
    """Stacked weights per kind of adapter at one site, built once per set of attached adapters
    and rebuilt only when one is added or removed or a stacked parameter changed in place (its
    version counter moved)."""

    def __init__(self) -> None:
        self._entries: dict[object, tuple[tuple, Stacked]] = {}

    def get(self, key: object, modules: dict[str, torch.nn.Module],
            stack: Callable[[list[torch.nn.Module]], tuple[torch.Tensor, ...]]) -> Stacked:
        """`modules` (name -> module, not empty) stacked by `stack`, cached under `key`."""
        stamp = tuple((n, id(m), *(p._version for p in m.parameters())) for n, m in modules.items())
        hit = self._entries.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        with torch.no_grad():  # routing serves inference; training goes through activate()
            entry = Stacked({n: i for i, n in enumerate(modules)}, stack(list(modules.values())))
        self._entries[key] = (stamp, entry)
        return entry


def pad_stack(mats: list[torch.Tensor], dim: int) -> torch.Tensor:
    """Stack matrices along a new first dimension, zero-padding `dim` to the widest."""
    width = max(m.shape[dim] for m in mats)
    out = []
    for m in mats:
        pad = [0, 0] * (m.dim() - 1 - dim) + [0, width - m.shape[dim]]
        out.append(torch.nn.functional.pad(m, pad) if width != m.shape[dim] else m)
    return torch.stack(out)
