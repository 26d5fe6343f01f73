"""A routed site in a constant number of kernel launches: every adapter of the route at once.

The segmented form (`Route.apply`) runs each adapter on its own rows: the least arithmetic,
but each site's kernels launch once per adapter, and at the batch sizes of serving a GPU is
bound by those launches, not by the arithmetic (`benchmarks/bench_routing.py --device cuda`:
a batch mixing 8 adapters took 3.7x one adapter's time). Here a site stacks the adapters'
weights side by side, as Punica's and S-LoRA's kernels gather LoRA weights, and runs every
row through all of them in one product each, keeping each row's own columns by its slot:

    bottleneck (Houlsby): y + U[:, own] act(D[own] y + b_D[own]) + b_U[slot]
    LoRA:                 y + (alpha / r) B[:, own] A[own] x
    LayerNorm:            (x - mean) / std * gamma[slot] + beta[slot]

where `own` are the rows' adapter's columns of the stacked bottlenecks (the others are set
to zero before the up-projection, not multiplied by a mask, so nothing another adapter
computes, an overflow included, reaches a row; an up-projection or up bias with a NaN or
an infinity would reach every row through those zeros, so a site with one runs by
segments). Each up bias rides in the same product: its adapter gets one more column, whose
down row is zero and down bias 1, so after the activation it holds the constant c = act(1)
for every row, and whose up column is b_U / c (`with_bias_column`): no per-slot bias table, no
extra launch. A row of the base, or of an adapter with nothing here, gets exactly y (zeros
contribute +0) or the base LayerNorm's own output, so it stays bit-identical to the base.

A stack's slots are the route's `numbering` (every adapter loaded, in name order, up to
`NUMBERED` of them), so one stack serves batches mixing any of them: a bottleneck site (and
a head kind) stacks all the adapters it has, unless a batch uses fewer than half of them
(`stacks_all`), when it stacks the batch's own rather than more than double their arithmetic
(and the checks that a kept stack still holds, made every pass); a LayerNorm site, whose rows
each read one slot's parameters, always all. Stacks are kept until a weight changes or the
model's adapters do; they are for inference only (the caller checks
`torch.is_grad_enabled()`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable, Iterable, NamedTuple, TypeVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.optimizer import Optimizer, register_optimizer_step_post_hook

from hubcli.core.routing import Route

T = TypeVar("T")

# The most adapters a model numbers in its gathered routes; with more, a route numbers only
# its batch's, and each new mix rebuilds the stacks. Every pass pays for the numbering's size:
# the rows' slots are looked up in it, and a LayerNorm site's kept table is checked whole.
NUMBERED = 64


class Parts(NamedTuple):
    """One adapter as a stack takes it: out = y + up act(down . + down_bias) + up_bias, of x
    or of y (`BottleneckAdapter.parts`, `LoraAdapter.parts`)."""

    reads_input: bool            # LoRA reads the Linear's input x; a bottleneck its output y
    down: torch.Tensor           # [m, d_in]
    down_bias: torch.Tensor | None
    act: Callable[[torch.Tensor], torch.Tensor] | None
    up: torch.Tensor             # [d_out, m], LoRA's scale folded in
    up_bias: torch.Tensor | None


class Bottlenecks(NamedTuple):
    """The route's adapters at one wrapped Linear, side by side."""

    reads_input: bool
    down: torch.Tensor            # [M, d_in]: every adapter's rows (and bias column's), grouped
                                  # by activation
    down_bias: torch.Tensor | None
    acts: tuple[tuple[Callable[[torch.Tensor], torch.Tensor], int, int], ...]  # on columns
    up_t: torch.Tensor            # [M, d_out]: the up-projections, transposed for addmm
    owner: torch.Tensor           # [M]: the slot each column belongs to
    layout: tuple                 # (slot, width) per run of columns: sites alike share masks

    def __call__(self, x: torch.Tensor, y: torch.Tensor, route: Route) -> torch.Tensor:
        slots = route.slot_index(y)
        h = F.linear(x if self.reads_input else y, self.down, self.down_bias)
        if len(self.acts) == 1:
            h = self.acts[0][0](h)
        elif self.acts:
            h = torch.cat([act(h[..., s:e]) for act, s, e in self.acts], -1)
        # h is this call's own: cleared in place, with the mask every site of this layout uses
        h.masked_fill_(route.memo(("others", self.layout, y.dim()),
                                  lambda: slots[..., None] != self.owner), 0.0)
        d = y.shape[-1]  # y + h U^T (up biases included) as one product-and-add
        return torch.addmm(y.reshape(-1, d), h.reshape(-1, h.shape[-1]), self.up_t
                           ).view(y.shape)


class LayerNorms(NamedTuple):
    """One LayerNorm's affine parameters per slot: the base's, plus each stacked adapter's
    deltas."""

    affine: torch.Tensor  # [slots, 2 d]: gamma, then beta
    plain: torch.Tensor   # [slots] bool: the base's own parameters (no deltas here)
    plain_slots: tuple[bool, ...]  # the same on the host: LayerNorms alike share row masks
    ones: torch.Tensor    # [d]: normalizing with a weight of ones gives the same numbers as
                          # none, but a CPU's kernel without one is about 2x slower

    def __call__(self, x: torch.Tensor, base: nn.LayerNorm, route: Route, plain_rows: bool
                 ) -> torch.Tensor:
        """`base` on `x` with each row's slot's parameters; where some rows are of a plain slot
        (`plain_rows`: the base's, or an adapter's without deltas here), they get the base
        LayerNorm's own output."""
        slots = route.slot_index(x)
        normed = F.layer_norm(x, base.normalized_shape, self.ones, None, base.eps)
        affine = per_slot(self.affine, slots)  # one gather for both
        d = x.shape[-1]
        out = torch.addcmul(affine[..., d:], normed, affine[..., :d])
        if plain_rows:
            return torch.where(route.memo(("plain", self.plain_slots, x.dim()),
                                          lambda: per_slot(self.plain, slots)[..., None]),
                               base(x), out)
        return out


class StackCache:
    """What was stacked (or folded) from some adapters' weights, for the last few keys
    (`SIZE`: a server alternating a few mixes, a Parallel beside mixed batches): a site's
    stacks per numbering (and per batch's adapters, `stacks_all`), a head kind's alike, a
    fusion's fold per set of components. Each is kept while its weights stay
    (`_Kept.holds`): written in place (an optimizer step, a load) a weight's version
    changes, moved (another device) its storage, replaced (a Parameter or submodule
    assigned) its module's entry. A site clears its own when it adds or removes an adapter,
    the model every site's and head kind's when its adapters change (a new numbering). Listing
    the weights walks the modules, which costs more than a gathered site's kernels take to
    launch, so it is done on a rebuild only."""

    SIZE = 4

    def __init__(self) -> None:
        self.kept: OrderedDict[Hashable, _Kept] = OrderedDict()
        self._lock = threading.Lock()  # hub serve's workers route through one site at once

    def __getstate__(self) -> dict:  # a copy (deepcopy, pickle) starts empty, with its own lock
        return {}

    def __setstate__(self, _state: dict) -> None:
        self.__init__()

    def clear(self) -> None:
        with self._lock:
            self.kept.clear()

    def get(self, key: Hashable, modules: Callable[[], list[nn.Module]],
            build: Callable[[], T]) -> T:
        """The stack for `key`, from `build()` unless the one kept still holds; `modules()`
        lists the modules whose own parameters it is built from."""
        with self._lock:
            kept = self.kept.get(key)
            if kept is not None and kept.holds():
                self.kept.move_to_end(key)
                return kept.stack
            self.kept.pop(key, None)  # a rebuilt stack is the newest
            self.kept[key] = kept = _Kept.of(modules(), build())
            if len(self.kept) > self.SIZE:
                self.kept.popitem(last=False)
            return kept.stack


class _Kept(NamedTuple):
    """A stack with what it was built from: which modules and tensors (held, so no new
    object takes one of their ids), the tensors' storages and their versions."""

    modules: list[nn.Module]
    entries: list[dict]            # each module's own parameters and submodules
    ids: list[int]                 # what those held
    weights: list[torch.Tensor]
    versioned: list[torch.Tensor]  # those with a version counter
    ptrs: list[int]
    versions: list[int]
    stack: object

    @classmethod
    def of(cls, modules: list[nn.Module], stack: object) -> _Kept:
        # an empty one is left out: a stack reads no parameter or submodule added there later
        entries = [d for m in modules for d in (m._parameters, m._modules) if d]
        weights = [p for m in modules for p in m._parameters.values() if p is not None]
        # an inference tensor (made under torch.inference_mode) has no version counter: only
        # its storage tells, so one written in place there goes unnoticed, as `p.data` writes do
        versioned = [p for p in weights if not p.is_inference()]
        return cls(modules, entries, [id(v) for d in entries for v in d.values()], weights,
                   versioned, [p.data_ptr() for p in weights], [p._version for p in versioned],
                   stack)

    def holds(self) -> bool:
        """Nothing replaced (a Parameter or a submodule assigned), moved or written in place
        since. Run on every site of every pass: flat comprehensions, no tuples built."""
        return ([id(v) for d in self.entries for v in d.values()] == self.ids
                and [p.data_ptr() for p in self.weights] == self.ptrs
                and [p._version for p in self.versioned] == self.versions)


def _bump_versions_after_fused_step(optimizer: Optimizer, _args: tuple, _kwargs: dict
                                    ) -> None:
    """A fused optimizer step (`fused=True`: one kernel for a whole group, as the project's
    trainer runs AdamW) writes its parameters in place without bumping their version counters,
    which is how a kept stack, fold or table knows its weights changed (`_Kept.holds`); the
    other step forms do bump them. So bump them here, for every fused group's parameters."""
    fused = [p for group in optimizer.param_groups if group.get("fused")
             for p in group["params"]]
    if fused:
        torch.autograd.graph.increment_version(fused)


# process-wide, once: any optimizer may have stepped weights that something here keeps
register_optimizer_step_post_hook(_bump_versions_after_fused_step)


def stacks_all(used: int, present: int) -> bool:
    """Whether a site stacks all `present` adapters it has, when a batch uses `used` of them:
    then every mix of them shares one stack, for at most twice the arithmetic of the batch's
    own; where fewer are used, it stacks the batch's own (a stack per mix)."""
    return 2 * used >= present


def bottlenecks(numbering: tuple[str, ...], names: Iterable[str],
                adapters: dict[str, nn.Module]) -> Bottlenecks | None:
    """The stack of `names`' adapters at one Linear (slot k + 1 for numbering[k]; one at
    least is here); None where they cannot share one: both methods at one site, a
    bottleneck that reads past its Linear (its `parts()` is None), or an up-projection or
    up bias that is not finite (every row multiplies them all, if only by zero: 0 x NaN
    would reach them all)."""
    slot = {n: k + 1 for k, n in enumerate(numbering)}
    present = [(slot[n], adapters[n].parts()) for n in names if n in adapters]
    first = present[0][1]
    if any(p is None or p.reads_input != first.reads_input for _, p in present):
        return None
    groups: dict = {}  # one activation per run of columns: adapters with the same, together
    for k, p in present:
        groups.setdefault(p.act, []).append((k, with_bias_column(p)))
    present = [kp for group in groups.values() for kp in group]
    parts = [p for _, p in present]
    acts, start = [], 0
    for act, group in groups.items():
        end = start + sum(p.down.shape[0] for _, p in group)
        if act is not None:
            acts.append((act, start, end))
        start = end
    owner = torch.tensor([k for k, p in present for _ in range(p.down.shape[0])],
                         device=first.down.device)
    up_t = torch.cat([p.up for p in parts], 1).t().contiguous()
    # every row multiplies them all, if only by zero (and a zero act(1) makes b_U / c infinite)
    if not bool(torch.isfinite(up_t).all()):
        return None
    down_bias = None
    if any(p.down_bias is not None for p in parts):
        down_bias = torch.cat([p.down.new_zeros(p.down.shape[0]) if p.down_bias is None
                               else p.down_bias for p in parts])
    return Bottlenecks(first.reads_input, torch.cat([p.down for p in parts]), down_bias,
                       tuple(acts), up_t, owner, tuple((k, p.down.shape[0]) for k, p in present))


def with_bias_column(p: Parts) -> Parts:
    """`p` with its up bias as one more hidden column (none left): down row 0, down bias 1,
    so the column holds c = act(1) on every row, and up column b_U / c."""
    if p.up_bias is None:
        return p
    one = p.down.new_ones(1)
    c = one if p.act is None else p.act(one)
    down_bias = p.down.new_zeros(p.down.shape[0]) if p.down_bias is None else p.down_bias
    return Parts(p.reads_input, torch.cat([p.down, p.down.new_zeros(1, p.down.shape[1])]),
                 torch.cat([down_bias, one]), p.act,
                 torch.cat([p.up, (p.up_bias / c)[:, None]], 1), None)


def layernorms(numbering: tuple[str, ...], base: nn.LayerNorm, deltas: dict[str, nn.Module]
               ) -> LayerNorms:
    """The base LayerNorm's parameters per slot (slot k + 1 for numbering[k]; slot 0, the
    base's), with the deltas of those that have some here; other slots plain."""
    weights, biases, plain = [base.weight], [base.bias], [True]
    for n in numbering:
        delta = deltas[n] if n in deltas else None
        weights.append(base.weight if delta is None else base.weight + delta.weight_delta)
        biases.append(base.bias if delta is None else base.bias + delta.bias_delta)
        plain.append(delta is None)
    return LayerNorms(torch.cat([torch.stack(weights), torch.stack(biases)], 1),
                      torch.tensor(plain, device=base.weight.device), tuple(plain),
                      torch.ones_like(base.weight))


def per_slot(table: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """`table[slots]`, a per-slot table's row for each row or token (`Route.slot_index`), as
    one `index_select`: indexing with a tensor costs the host several times more per call,
    and a pass makes one at every LayerNorm."""
    return table.index_select(0, slots.view(-1)).view(*slots.shape, *table.shape[1:])
