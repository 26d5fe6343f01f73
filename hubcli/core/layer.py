"""Module wrappers that keep the frozen `base_layer` and a dict of named adapters.

`AdapterLinear` wraps a Linear and hands each adapter both its input x and the base output
y = base(x): a Houlsby adapter on a sublayer's output projection returns y + up(act(down(y))),
applied before the sublayer's dropout, residual add and LayerNorm (Houlsby et al., Fig. 2); a
LoRA adapter on a query or value projection returns y + (alpha / r) B A x (Hu et al. 2021).
A bottleneck in another form (`HoulsbyConfig.reads`/`skip`: Pfeiffer et al.'s after the
LayerNorm, He et al.'s parallel one) returns skip + f(reads), computed from h = y, the
sublayer's input r and its LayerNorm, which the sublayer then turns into LN(. + r): in eval
mode, with f = up(act(down(.))),
    output: h    sum: h + r    normed: LN(h + r)    input: r.
(Training differs from the `adapters` library's as Houlsby's form does: the sublayer's dropout
acts on what the site returns, not on h before the adapter.) The sublayer's input reaches the
wrapper through a hook on the sublayer (`wire`), set only once such an adapter is added.
`DeltaLayerNorm` wraps a LayerNorm: gamma = gamma_base + delta, beta = beta_base + delta, so
each adapter trains its own LayerNorm without touching the shared base tensors.

With no adapter active both wrappers call the base module directly, so outputs are
bit-identical to the untouched model. With a `Route` set (see `routing.py`) they instead apply
each adapter to its own contiguous segment of the batch's rows, or, for a gathered route in
inference, all of them at once over stacked weights (`gathered.py`, from each adapter's
`parts()`).
"""

from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from hubcli.core.composition import Block, Fuse, Stack
from hubcli.core import gathered
from hubcli.core.config import AdapterConfig, HoulsbyConfig, LoraConfig
from hubcli.core.names import AdapterTable
from hubcli.core.ops import ACTIVATION_FUNCTIONS
from hubcli.core.routing import PerThread, Route, Routes


class Sublayer(NamedTuple):
    """What a bottleneck reading past its Linear gets from the sublayer around it: the
    sublayer's input (its residual) and its LayerNorm as the adapter's rows see it."""

    residual: torch.Tensor
    layer_norm: Callable[[torch.Tensor], torch.Tensor]


class BottleneckAdapter(nn.Module):
    """Adapter(y) = y + f(y), f(y) = W_up(act(W_down y + b_down)) + b_up, d -> m -> d; in
    another form (`reads`, `skip`), skip + f(reads) (see the module's doc)."""

    def __init__(self, d: int, config: HoulsbyConfig):
        super().__init__()
        self.down = nn.Linear(d, config.bottleneck)
        self.act = ACTIVATION_FUNCTIONS[config.non_linearity]
        self.up = nn.Linear(config.bottleneck, d)
        self.reads, self.skip = config.reads, config.skip
        self.needs_sublayer = config.needs_sublayer
        self.reset_parameters(config.init_scale)

    def reset_parameters(self, init_scale: float) -> None:
        # Near-identity start: tiny weights and zero biases make the adapter ~x, so training
        # begins from the base model's behaviour (Houlsby et al., section 2.1).
        for lin in (self.down, self.up):
            if init_scale > 0:
                nn.init.trunc_normal_(lin.weight, std=init_scale, a=-2 * init_scale, b=2 * init_scale)
            else:
                nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x: torch.Tensor, y: torch.Tensor, sublayer: Sublayer | None = None
                ) -> torch.Tensor:
        """`y` is the base layer's output for input `x`; the adapter transforms `y`, reading
        `sublayer` too when `needs_sublayer`."""
        if sublayer is None:
            return y + self.up(self.act(self.down(y)))
        taps = {"output": y, "input": sublayer.residual}
        wanted = {self.reads, self.skip}
        if wanted & {"sum", "normed"}:
            taps["sum"] = y + sublayer.residual
        if "normed" in wanted:  # a LayerNorm only where the form reads or adds it back
            taps["normed"] = sublayer.layer_norm(taps["sum"])
        return taps[self.skip] + self.up(self.act(self.down(taps[self.reads])))

    def parts(self) -> gathered.Parts | None:
        """This adapter for a gathered site; None for a form that reads past its Linear."""
        if self.needs_sublayer:
            return None
        return gathered.Parts(False, self.down.weight, self.down.bias, self.act,
                              self.up.weight, self.up.bias)



class LoraAdapter(nn.Module):
    """LoRA(x, y) = y + (alpha / r) B(A(x)), A: d_in -> r, B: r -> d_out, no biases."""

    needs_sublayer = False

    def __init__(self, d_in: int, d_out: int, config: LoraConfig):
        super().__init__()
        self.A = nn.Linear(d_in, config.rank, bias=False)
        self.B = nn.Linear(config.rank, d_out, bias=False)
        self.scale = config.scale
        # A as nn.Linear initialises itself (Kaiming-uniform); B = 0 makes the update start at
        # exactly zero (Hu et al., section 4.1)
        nn.init.zeros_(self.B.weight)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return y + self.B(self.A(x)) * self.scale

    def parts(self) -> gathered.Parts:
        """This adapter for a gathered site."""
        return gathered.Parts(True, self.A.weight, None, None, self.B.weight * self.scale, None)



class AdapterFusion(nn.Module):
    """AdapterFusion at one site (Pfeiffer et al. 2021): scores softmax_k((Q y) . (K o_k)) over
    the adapters' outputs o_k, with the sublayer output y as query; returns sum_k s_k V o_k.
    V starts as the identity, so a fresh fusion mixes the adapters' outputs as they are."""

    def __init__(self, d: int):
        super().__init__()
        # no key bias: it adds the same score to every adapter's output, which softmax ignores
        self.query, self.key = nn.Linear(d, d), nn.Linear(d, d, bias=False)
        self.value = nn.Linear(d, d)
        nn.init.normal_(self.query.weight, std=0.02)
        nn.init.zeros_(self.query.bias)
        nn.init.normal_(self.key.weight, std=0.02)
        nn.init.eye_(self.value.weight)
        nn.init.zeros_(self.value.bias)
        self._query_key_kept = gathered.StackCache()  # `_query_key`, without gradients
        # forward_bottlenecks' folded matrices, per set of adapters (kept as a gathered
        # site's stacks are: until a weight changes, or the site adds or removes an adapter)
        self._fold = gathered.StackCache()

    def forward(self, y: torch.Tensor, outputs: torch.Tensor) -> torch.Tensor:
        """`y` [..., d] (rows x tokens, or packed tokens), `outputs` [K, ..., d] -> [..., d]."""
        # Both projections of the K outputs fold away, exactly: (Q y) . (W_K o) = o . (W_K^T Q y),
        # and sum_k s_k V o_k = V (sum_k s_k o_k) since the weights sum to 1; Q and W_K fold
        # into one matrix too (`_query_key`): two d x d products per token instead of 2K + 1.
        weight, bias = self._query_key()
        scores = torch.einsum("...d,k...d->...k", F.linear(y, weight, bias), outputs)
        mixed = torch.einsum("...k,k...d->...d", scores.softmax(-1), outputs)
        return self.value(mixed)

    def forward_bottlenecks(self, y: torch.Tensor, adapters: list[BottleneckAdapter]
                            ) -> torch.Tensor:
        """`forward(y, outputs)` for Houlsby adapters o_k = y + U_k act(D_k y) + c_k, without
        the K outputs ever existing (inference; Houlsby et al.'s children share `act`).

        Why it is the same: the query-key score q.o_k = q.y + q.a_k, and softmax ignores the
        q.y every adapter shares; q.a_k = (U_k^T q).h_k + q.c_k with q = W y + b. Each h_k
        carries c_k in one more column (`gathered.with_bias_column`: a constant column, whose
        up column is c_k over that constant), so q.a_k = (U_k^T q).h_k alone, and one product
        of y with the folded rows U_k^T W scores every adapter in the m-dimensional space of
        its hidden states (K (m + 1) columns instead of the d of the query-key product). The
        weights sum to 1, so the mixture is y plus the adapters' up-projections of their
        score-weighted hidden states, biases included: one product with [U_1 ... U_K].
        """
        inputs, bias, m, seg, up_t = self._fold.get(
            tuple(adapters),  # the modules themselves: while kept, no other takes their id
            lambda: [self.query, self.key, *(m for a in adapters for m in a.modules())],
            lambda: self._bottleneck_fold(adapters))
        flat = y.reshape(-1, y.shape[-1])  # tokens as rows, for addmm
        # one product of y gives every adapter's pre-activation and the folded query rows
        z = F.linear(flat, inputs, bias)   # [tokens, M | M]
        h = adapters[0].act(z[:, :m])      # every adapter's h_k
        weights = ((z[:, m:] * h) @ seg).softmax(-1)  # [tokens, K]
        mixed = torch.addmm(flat, h.mul_(weights @ seg.t()), up_t)
        return self.value(mixed).view(y.shape)

    def _bottleneck_fold(self, adapters: list[BottleneckAdapter]
                         ) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor, torch.Tensor]:
        """The stacked and folded matrices of `forward_bottlenecks`: the down-projections and
        folded query rows as one [2 M, d] matrix with its bias, M, the [M, K] map from
        columns to adapters, and the up-projections transposed [M, d]; each adapter's M
        columns include its bias column (`gathered.with_bias_column`)."""
        weight, bias = self._query_key()  # q = W y + b
        parts = [gathered.with_bias_column(a.parts()) for a in adapters]
        up_w = torch.cat([p.up for p in parts], 1)  # [d, M]
        sizes = [p.down.shape[0] for p in parts]
        seg = torch.block_diag(*[up_w.new_ones(n, 1) for n in sizes])  # [M, K]
        with _full_precision(weight):  # kept for later passes, autocast or not
            inputs = torch.cat([*(p.down for p in parts), up_w.t() @ weight])
            biases = torch.cat([*(p.down_bias for p in parts), up_w.t() @ bias])
        return inputs, biases, sum(sizes), seg, up_w.t().contiguous()

    def _query_key(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(W_K^T W_Q, W_K^T b_Q): the query and key projections as one Linear. Without
        gradients it is kept until the query or key changes (as a gathered site's stacks
        are), so a small inference batch does not pay the d^3 product each time."""
        if torch.is_grad_enabled():
            return self._multiply_query_key()
        return self._query_key_kept.get(None, lambda: [self.query, self.key],
                                        self._multiply_query_key)

    def _multiply_query_key(self) -> tuple[torch.Tensor, torch.Tensor]:
        q, k = self.query, self.key
        with _full_precision(q.weight):  # kept for later passes, autocast or not
            return k.weight.t() @ q.weight, k.weight.t() @ q.bias


def _full_precision(weight: torch.Tensor) -> torch.autocast:
    """Autocast off on `weight`'s device: products kept across passes are made in the
    weights' own dtype, whatever the pass that happens to build them runs under."""
    return torch.autocast(weight.device.type, enabled=False)


def build_adapter(config: AdapterConfig, base_layer: nn.Linear) -> nn.Module:
    """A fresh adapter of `config`'s method for one wrapped Linear."""
    if isinstance(config, LoraConfig):
        return LoraAdapter(base_layer.in_features, base_layer.out_features, config)
    return BottleneckAdapter(base_layer.out_features, config)


class AdapterLinear(nn.Module):
    """A frozen Linear followed by the active named adapter, if any; or, in a routed pass (a
    route in `routes`), by each row's own adapter."""

    # each thread's own, so concurrent passes stay apart: the sublayer's input (as the
    # model's `routes` holds each thread's route)
    residual = PerThread()

    def __init__(self, base_layer: nn.Linear):
        super().__init__()
        self.base_layer = base_layer
        self.adapters = AdapterTable()
        self.fusions = AdapterTable()
        self.active: Block | None = None
        self.routes = Routes()  # the model's, shared by its sites (`AdapterModel`)
        self.bypass = False  # adapters switched off here (ablation, AdapterDrop)
        # (the sublayer module, its LayerNorm): in a tuple, so neither registers as a child
        self._wiring: tuple[nn.Module, DeltaLayerNorm] | None = None
        self._hooked = False
        self.residual: torch.Tensor | None = None  # the sublayer's input, during its call
        self._stack = gathered.StackCache()

    def wire(self, sublayer: nn.Module, layer_norm: DeltaLayerNorm) -> None:
        """Name the sublayer around this Linear (its forward takes (hidden, input_tensor),
        adds input_tensor and applies `layer_norm`), for adapters that read past the Linear."""
        self._wiring = (sublayer, layer_norm)

    def add(self, name: str, config: AdapterConfig) -> nn.Module:
        w = self.base_layer.weight
        adapter = build_adapter(config, self.base_layer).to(device=w.device, dtype=w.dtype)
        if adapter.needs_sublayer and not self._hooked:
            # the sublayer's input, kept for its call only (this Linear runs inside it)
            sublayer = self._wiring[0]
            sublayer.register_forward_pre_hook(self._keep_input, with_kwargs=True)
            sublayer.register_forward_hook(self._drop_input, always_call=True)
            self._hooked = True
        self.adapters[name] = adapter
        self._forget()
        return adapter

    def _forget(self) -> None:
        """Drop what was stacked or folded from the adapters here: they changed."""
        self._stack.clear()
        for fusion in self.fusions.values():
            fusion._fold.clear()

    def _keep_input(self, _module: nn.Module, args: tuple, kwargs: dict) -> None:
        # (hidden, input): positional, or by the name transformers' (or our compact) BERT gives it
        self.residual = args[1] if len(args) > 1 else kwargs.get("input_tensor",
                                                                 kwargs.get("residual"))

    def _drop_input(self, _module: nn.Module, _args: tuple, _output: torch.Tensor) -> None:
        self.residual = None

    def _run(self, name: str, x: torch.Tensor, y: torch.Tensor,
             rows: tuple[slice, str] | None = None) -> torch.Tensor:
        """Adapter `name` on `x`, `y`: the whole batch, or routed `rows` (its rows, and whose
        LayerNorm deltas they use: the adapter's own, or its composition's owner's). One
        reading past the Linear sees the LayerNorm as the sublayer applies it to those rows:
        with the active block's deltas, or with the rows' owner's."""
        adapter = self.adapters[name]
        if not adapter.needs_sublayer:
            return adapter(x, y)
        layer_norm = self._wiring[1]
        residual, norm_as = ((self.residual, layer_norm.active) if rows is None
                             else (self.residual[rows[0]], rows[1]))
        return adapter(x, y, Sublayer(residual, partial(layer_norm.as_adapter, name=norm_as)))

    def remove(self, name: str) -> None:
        if name in self.adapters:  # what was stacked or folded from it goes with it
            del self.adapters[name]
            self._forget()
        if name in self.fusions:
            del self.fusions[name]
        if self.active == name:
            self.active = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base_layer(x)
        if self.bypass:
            return y
        route = self.routes.route
        if route is not None:
            return self._routed(x, y, route)
        if self.active is None:
            return y
        return self._composed(x, y, self.active)

    def _composed(self, x: torch.Tensor, y: torch.Tensor, block: Block,
                  rows: tuple[slice, str] | None = None) -> torch.Tensor:
        """`block` on `x`, `y`: the whole batch, or routed `rows` (see `_run`)."""
        if isinstance(block, str):
            return self._run(block, x, y, rows) if block in self.adapters else y
        if isinstance(block, Stack):
            for child in block.children:
                y = self._composed(x, y, child, rows)
            return y
        if isinstance(block, Fuse) and block.name in self.fusions:
            fusion = self.fusions[block.name]
            children = [self.adapters[c] if isinstance(c, str) and c in self.adapters else None
                        for c in block.children]
            # the fold is for Houlsby's form only, and not for a trace (ONNX has no block_diag)
            if not torch.is_grad_enabled() and not torch.jit.is_tracing() and all(
                    isinstance(c, BottleneckAdapter) and not c.needs_sublayer
                    and c.act is children[0].act for c in children):
                return fusion.forward_bottlenecks(y, children)
            outputs = torch.stack([self._composed(x, y, c, rows) for c in block.children])
            return fusion(y, outputs)
        return y

    def _acts(self, route: Route, name: str) -> bool:
        """Whether the rows of `name` change here: it has an adapter here, or, composed, one
        of its block's adapters or fusions has."""
        parts = route.parts.get(name)
        if parts is None:
            return name in self.adapters
        return any(n in self.adapters for n in parts[0]) or any(f in self.fusions
                                                                 for f in parts[1])

    def _routed(self, x: torch.Tensor, y: torch.Tensor, route: Route) -> torch.Tensor:
        if route.gathering():
            out = self._gathered(x, y, route)
            if out is not None and not route.blocks:
                return out
            if out is not None:  # the single adapters' rows; the composed run on theirs
                return route.overwrite(out, partial(self._acts, route),
                                       partial(self._segment, route, x, y))
        acts = partial(self._acts, route) if route.blocks else self.adapters.__contains__
        return route.apply(y, acts, partial(self._segment, route, x, y))

    def _gathered(self, x: torch.Tensor, y: torch.Tensor, route: Route) -> torch.Tensor | None:
        """Every single adapter's rows at once over stacked weights, the other rows kept as
        `y`; None where the adapters here cannot share a stack (run by segments then)."""
        used = self.adapters.count_of(route.keys)
        if not used:
            return y
        stack = self._stacked(route, gathered.stacks_all(used, len(self.adapters)))
        return None if stack is None else stack(x, y, route)

    def _segment(self, route: Route, x: torch.Tensor, y: torch.Tensor, name: str, start: int,
                 end: int) -> torch.Tensor:
        """Rows start..end of adapter `name` (a composed one: through its block)."""
        rows = slice(start, end)
        block = route.blocks.get(name)
        if block is None:  # a single adapter here (the most common case: kept short)
            return self._run(name, x[rows], y[rows], (rows, name))
        return self._composed(x[rows], y[rows], block, (rows, route.owner_of(name)))

    def _stacked(self, route: Route, every: bool) -> gathered.Bottlenecks | None:
        """The adapters here stacked in the slots of the route's numbering: `every` one, or
        the route's own (one at least is here), as well where all of them cannot share a
        stack (one reads past its Linear: the batches without it need not run by segments);
        None where the route's cannot either."""
        if every:
            stack = self._stack_of(route, None)
            if stack is not None:
                return stack
        return self._stack_of(route, tuple(n for n in route.single if n in self.adapters))

    def _stack_of(self, route: Route, names: tuple[str, ...] | None
                  ) -> gathered.Bottlenecks | None:
        """`names`' adapters (None: all numbered here) stacked, kept per numbering."""
        def chosen() -> list[str]:  # on a rebuild only: the numbering may be long
            return [n for n in (route.numbering if names is None else names)
                    if n in self.adapters]

        return self._stack.get(
            (route.numbering, names, self.adapters.version),  # the table: not edited since
            lambda: [m for n in chosen() for m in self.adapters[n].modules()],
            lambda: gathered.bottlenecks(route.numbering, chosen(), self.adapters))


class LayerNormDelta(nn.Module):
    """Per-adapter additive deltas for one LayerNorm's weight and bias (start at zero)."""

    def __init__(self, d: int, *, device=None, dtype=None):
        super().__init__()
        self.weight_delta = nn.Parameter(torch.zeros(d, device=device, dtype=dtype))
        self.bias_delta = nn.Parameter(torch.zeros(d, device=device, dtype=dtype))


class DeltaLayerNorm(nn.Module):
    """A frozen LayerNorm whose affine parameters get the active adapter's deltas."""

    def __init__(self, base_layer: nn.LayerNorm):
        super().__init__()
        self.base_layer = base_layer
        self.deltas = AdapterTable()
        self.active: str | None = None
        self.routes = Routes()  # the model's, shared by its sites (`AdapterModel`)
        self._stack = gathered.StackCache()

    def add(self, name: str) -> LayerNormDelta:
        w = self.base_layer.weight
        delta = LayerNormDelta(w.shape[0], device=w.device, dtype=w.dtype)
        self.deltas[name] = delta
        self._stack.clear()
        return delta

    def remove(self, name: str) -> None:
        if name in self.deltas:
            del self.deltas[name]
            self._stack.clear()
        if self.active == name:
            self.active = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        route = self.routes.route
        if route is None:
            return self.as_adapter(x, self.active)
        if route.gathering():
            with_deltas = self.deltas.count_of(route.keys)
            out = self.base_layer(x) if not with_deltas else self._stacked(route.numbering)(
                x, self.base_layer, route, route.has_base or with_deltas < len(route.single))
            if not route.blocks:
                return out
            # a composed adapter's rows (slot 0: the base's here) with their owner's deltas
            return route.overwrite(out, partial(self._owns, route),
                                   partial(self._segment, route, x))
        has = partial(self._owns, route) if route.blocks else self.deltas.__contains__
        return route.apply(self.base_layer(x), has, partial(self._segment, route, x))

    def _owns(self, route: Route, name: str) -> bool:
        """Whether the rows of `name` have deltas here: its own, or its owner's (composed)."""
        return route.owner_of(name) in self.deltas

    def _segment(self, route: Route, x: torch.Tensor, name: str, start: int, end: int
                 ) -> torch.Tensor:
        return self.as_adapter(x[start:end], route.owner_of(name))

    def _stacked(self, numbering: tuple[str, ...]) -> gathered.LayerNorms:
        """This LayerNorm's parameters per slot of `numbering`: every adapter numbered, its
        deltas (one at least has some here). A row reads its own slot's, so unlike a
        bottleneck's a table of all costs a pass no more arithmetic than one of the batch's,
        and any mix of them shares it."""
        return self._stack.get(
            (numbering, self.deltas.version),  # the table: not edited since
            lambda: [self.base_layer, *(self.deltas[n] for n in numbering if n in self.deltas)],
            lambda: gathered.layernorms(numbering, self.base_layer, self.deltas))

    def as_adapter(self, x: torch.Tensor, name: str | None) -> torch.Tensor:
        """This LayerNorm with `name`'s deltas, or the base's where it has none."""
        if name is None or name not in self.deltas:
            return self.base_layer(x)
        base, delta = self.base_layer, self.deltas[name]
        return F.layer_norm(x, base.normalized_shape, base.weight + delta.weight_delta,
                            base.bias + delta.bias_delta, base.eps)
