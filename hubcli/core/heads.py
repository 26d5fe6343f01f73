"""Task heads. Each adapter owns one head; its labels travel with it in the manifest."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from hubcli.core.gathered import StackCache, stacks_all
from hubcli.core.names import AdapterTable
from hubcli.core.routing import Route
from hubcli.format.spec import HEAD_TYPES


@dataclass(frozen=True)
class HeadConfig:
    """What a task head predicts."""

    type: str = field(metadata={"help": "one of " + ", ".join(HEAD_TYPES)})
    num_outputs: int = field(metadata={"help": "classes, 1 for regression, 2 for QA start/end"})
    labels: tuple[str, ...] = field(default=(), metadata={"help": "id2label in id order"})
    pooling: str = field(default="mean", metadata={
        "help": "sequence heads: mean over tokens, or the first ([CLS]) token"})
    dropout: float = 0.1
    label_scheme: str | None = field(default=None, metadata={
        "help": "token heads: the tagging scheme the labels were learnt in (IOB1)"})

    def __post_init__(self) -> None:
        if self.type not in HEAD_TYPES:
            raise ValueError(f"unknown head type {self.type!r}; choose from {', '.join(HEAD_TYPES)}")

    def to_manifest(self) -> dict:
        out = {"type": self.type, "num_outputs": self.num_outputs, "labels": list(self.labels)}
        if self.type in ("sequence_classification", "regression"):
            out["pooling"] = self.pooling
        if self.label_scheme is not None:
            out["label_scheme"] = self.label_scheme
        return out

    @classmethod
    def from_manifest(cls, head: dict) -> HeadConfig:
        return cls(type=head["type"], num_outputs=int(head["num_outputs"]),
                   labels=tuple(head.get("labels", ())), pooling=head.get("pooling", "mean"),
                   label_scheme=head.get("label_scheme"))


class SequenceHead(nn.Module):
    """Pool the sequence, then dense + tanh + output (as BERT's classifier over its pooler)."""

    def __init__(self, d: int, cfg: HeadConfig):
        super().__init__()
        self.pooling = cfg.pooling
        self.dropout = nn.Dropout(cfg.dropout)
        self.dense = nn.Linear(d, d)
        self.out = nn.Linear(d, cfg.num_outputs)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.dense(self.dropout(pool(hidden, attention_mask, self.pooling))))
        return self.out(self.dropout(x))


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """[rows, n, d] -> [rows, d]: the first ([CLS]) token, or the mean over real tokens."""
    if pooling == "cls":
        return hidden[:, 0]
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


class TokenHead(nn.Module):
    """Per-token output: tagging labels, or QA start/end logits."""

    def __init__(self, d: int, cfg: HeadConfig):
        super().__init__()
        self.dropout = nn.Dropout(cfg.dropout)
        self.out = nn.Linear(d, cfg.num_outputs)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(hidden))


def build_head(d: int, cfg: HeadConfig) -> nn.Module:
    if cfg.type in ("sequence_classification", "regression"):
        return SequenceHead(d, cfg)
    return TokenHead(d, cfg)


class HeadStack(NamedTuple):
    """Heads of one kind side by side, for rows that each use their own (inference): every
    row goes through all of them in one product per layer and keeps its own head's outputs,
    padded to the widest (`routed_heads`)."""

    pooling: str | None         # sequence heads' pooling; None for token heads
    dense: torch.Tensor | None  # [K d, d] and [K d]: sequence heads' dense layers
    dense_bias: torch.Tensor | None
    out: torch.Tensor           # [K C, d] and [K C], each head's rows padded to C
    out_bias: torch.Tensor
    width: int                  # C, the widest head's outputs

    def __call__(self, hidden: torch.Tensor, mask: torch.Tensor, slot: torch.Tensor
                 ) -> torch.Tensor:
        """[rows, C] (sequence) or [rows, n, C] (token): each row's own head."""
        if self.pooling is None:
            out = F.linear(hidden, self.out, self.out_bias)
            return _own(out.view(*out.shape[:-1], -1, self.width), slot)
        x = F.linear(pool(hidden, mask, self.pooling), self.dense, self.dense_bias)
        x = torch.tanh(_own(x.view(len(slot), -1, hidden.shape[-1]), slot))
        return _own(F.linear(x, self.out, self.out_bias).view(len(slot), -1, self.width), slot)


def _own(t: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """[rows, ..., K, w] -> [rows, ..., w]: each row's own head's block (one `gather`, which
    costs the host less than indexing with two tensors)."""
    index = slot.view(-1, *(1,) * (t.dim() - 1)).expand(*t.shape[:-2], 1, t.shape[-1])
    return t.gather(-2, index).squeeze(-2)


def head_kind(head: nn.Module) -> tuple:
    """Heads of one kind can share a stack: sequence heads pooling alike, or token heads."""
    return ("sequence", head.pooling) if isinstance(head, SequenceHead) else ("token",)


def stack_heads(heads: list[nn.Module]) -> HeadStack:
    """`heads` (one kind, `head_kind`) side by side."""
    width = max(h.out.out_features for h in heads)
    outs = [F.pad(h.out.weight, (0, 0, 0, width - h.out.out_features)) for h in heads]
    biases = [F.pad(h.out.bias, (0, width - h.out.out_features)) for h in heads]
    sequence = isinstance(heads[0], SequenceHead)
    return HeadStack(heads[0].pooling if sequence else None,
                     torch.cat([h.dense.weight for h in heads]) if sequence else None,
                     torch.cat([h.dense.bias for h in heads]) if sequence else None,
                     torch.cat(outs), torch.cat(biases), width)


def routed_heads(heads: AdapterTable, segments: list[tuple[str, int, int]],
                 hidden: torch.Tensor, mask: torch.Tensor, stacks: dict,
                 to: torch.device | str | None = None, *, route: Route | None = None
                 ) -> dict[str, torch.Tensor]:
    """Each segment's rows (name, first, end) through that adapter's head (a composed
    adapter's: its owner's, `Route.owner_of`): {name: its rows' outputs}, moved `to` (in one
    copy per head, or per stack). Where `route` (the rows' route, in its order) gathers, in
    inference, heads of one kind run as one `HeadStack` over the rows they span
    (`_kind_stack`), kept in `stacks` per kind; else each head runs on its own rows."""
    head = {n: heads[n if route is None else route.owner_of(n)] for n, _, _ in segments}
    gather = (route is not None and route.gathering()
              and not any(h.training for h in head.values()))  # no dropout in a stack
    groups: dict = {}
    for n, s, e in segments:  # a composed adapter's head is not numbered: on its own
        stacked = gather and n not in route.blocks
        groups.setdefault(head_kind(head[n]) if stacked else n, []).append((n, s, e))
    out = {}
    for kind, members in groups.items():
        if len(members) == 1:
            n, s, e = members[0]
            o = head[n](hidden[s:e], mask[s:e])
            out[n] = o if to is None else o.to(to)
            continue
        stack, place = _kind_stack(heads, kind, tuple(n for n, _, _ in members), route, stacks)
        lo, hi = min(s for _, s, _ in members), max(e for _, _, e in members)
        # rows of other heads in the span take some head's outputs, dropped below
        res = stack(hidden[lo:hi], mask[lo:hi], place.index_select(0, route.slots[lo:hi]))
        res = res if to is None else res.to(to)
        for n, s, e in members:
            out[n] = res[s - lo:e - lo, ..., :head[n].out.out_features]
    return out


class KindStacks(StackCache):
    """One head kind's kept stacks, with the heads of the kind among a numbering: read
    through once per numbering and version of the heads table (a head set or deleted there
    directly makes another), not every pass."""

    def __init__(self) -> None:
        super().__init__()
        self._members: tuple = ((), -1, ())  # (numbering, table version, the kind's heads)

    def clear(self) -> None:
        super().clear()
        self._members = ((), -1, ())

    def members(self, heads: AdapterTable, kind: tuple, numbering: tuple[str, ...]
                ) -> tuple[str, ...]:
        """The heads of `numbering` in `heads` that are of `kind`."""
        seen, version, of_kind = self._members
        if seen is not numbering or version != heads.version:
            of_kind = tuple(n for n in numbering if n in heads and head_kind(heads[n]) == kind)
            self._members = (numbering, heads.version, of_kind)
        return of_kind


def _kind_stack(heads: AdapterTable, kind: tuple, names: tuple[str, ...],
                route: Route, stacks: dict) -> tuple[HeadStack, torch.Tensor]:
    """The heads of one `kind` for rows of `names` (that kind's), stacked as a gathered
    route's sites stack adapters: every head of the kind among its numbering (any mix of them
    shares it), or only `names`' (`stacks_all`); with each slot's place in the stack. Kept
    in `stacks` under the kind (`KindStacks`), with which of the numbering's heads are of
    it."""
    cache = stacks.get(kind) or stacks.setdefault(kind, KindStacks())  # made once
    of_kind = cache.members(heads, kind, route.numbering)
    chosen = of_kind if stacks_all(len(names), len(of_kind)) else names
    # the head modules in the key: one replaced under its name makes another key (held there,
    # no new module takes its id)
    own = tuple(heads[n] for n in chosen)

    def build() -> tuple[HeadStack, torch.Tensor]:
        at = {n: k for k, n in enumerate(chosen)}  # slot 0 (the base), and others: any place
        place = [at.get(n, 0) for n in (None, *route.numbering)]
        return stack_heads(list(own)), torch.tensor(place, device=route.slots.device)

    return cache.get((route.numbering, chosen, own), lambda: [m for h in own for m in h.modules()],
                     build)
