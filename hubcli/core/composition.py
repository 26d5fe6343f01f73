"""Composition blocks as data: how several loaded adapters combine in one forward pass.

    Stack("lang", "task")        task applied on lang's output at every site (MAD-X)
    Parallel("sst2", "ner")      every adapter's output for the same input, the layers below
                                 all of them computed once
    Fuse("a", "b", "c")          AdapterFusion (Pfeiffer et al. 2021): per site, attention over
                                 the adapters' outputs with the sublayer output as query

Nesting: a Stack or Fuse child may be a name, a Stack or a Fuse (`Stack("lang", Fuse("a", "b"))`);
Parallel takes names and sits at the top (`AdapterModel.forward_parallel`). A block names its
own head and LayerNorm deltas: a Stack uses its last child's, a Fuse has a head of its own and
the base LayerNorms. Torch-free: blocks are plain values.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Union

Block = Union[str, "Stack", "Parallel", "Fuse"]


@dataclass(frozen=True, init=False)
class _Block:
    """What every block shares: its children, checked on construction, and its spelling."""

    children: tuple[Block, ...]
    min_children = 2   # a Stack of one adapter is that adapter; Parallel and Fuse need two
    nests = True       # whether children may be Stacks and Fuses, or names only

    def __init__(self, *children: Block):
        kind = type(self).__name__
        if len(children) < self.min_children:
            wanted = "one adapter" if self.min_children == 1 else "two adapters"
            raise ValueError(f"{kind} needs at least {wanted}, got {len(children)}"
                             + ("" if self.min_children == 1 else
                                ": for one, name the adapter itself"))
        allowed = (str, Stack, Fuse) if self.nests else (str,)
        bad = [c for c in children if not isinstance(c, allowed)]
        if bad:
            takes = ("adapter names, Stacks and Fuses" if self.nests else
                     "adapter names (a fusion or stack loaded: by its name)")
            spelt = str(bad[0]) if isinstance(bad[0], _Block) else repr(bad[0])
            raise ValueError(f"{kind} cannot contain {spelt}: it takes {takes}")
        object.__setattr__(self, "children", children)

    def __str__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(str, self.children))})"


class Stack(_Block):
    min_children = 1


@dataclass(frozen=True, init=False)
class Fuse(_Block):
    """`name=`: what the fusion's own parameters and head are called, by default its spelling
    `Fuse(a, b)`; two fusions over the same adapters (one per target task, as Pfeiffer et al.
    train them) are told apart by it."""

    label: str | None = None

    def __init__(self, *children: Block, name: str | None = None):
        super().__init__(*children)
        object.__setattr__(self, "label", name)

    @cached_property  # read at every site of every pass
    def name(self) -> str:
        """The name of this fusion's own parameters and head, as an adapter's."""
        return self.label or str(self)


class Parallel(_Block):
    children: tuple[str, ...]
    nests = False


def names_in(block: Block) -> list[str]:
    """Every adapter name a block uses (fusions excluded), in order."""
    if isinstance(block, str):
        return [block]
    return [n for c in block.children for n in names_in(c)]


def fusions_in(block: Block) -> list[Fuse]:
    """Every Fuse inside a block, itself included."""
    if isinstance(block, str):
        return []
    inner = [f for c in block.children for f in fusions_in(c)]
    return [*inner, block] if isinstance(block, Fuse) else inner


def members(block: Block) -> tuple[list[str], list[str]]:
    """(every adapter name a block uses, the names of its fusions' own parameters): what may
    act for its rows at a site."""
    return names_in(block), [f.name for f in fusions_in(block)]


def owner(block: Block) -> str:
    """Whose head and LayerNorm deltas a block uses: a name's own, a Stack's last child's,
    a Fuse's own (its name)."""
    if isinstance(block, str):
        return block
    if isinstance(block, Stack):
        return owner(block.children[-1])
    if isinstance(block, Fuse):
        return block.name
    raise ValueError(f"{block} has no single head; use AdapterModel.forward_parallel")


def matching(block: Stack | Fuse, compositions: dict[str, Block]) -> list[tuple[str, Block]]:
    """The (name, block) of `compositions` spelt as `block`: of its kind, over the same
    children, and for a Fuse given a name, of that name (the composition's, or the one its
    parameters are under)."""
    wanted = getattr(block, "label", None)
    return [(n, b) for n, b in compositions.items()
            if type(b) is type(block) and b.children == block.children
            and (wanted is None or wanted in (n, b.name))]


def spelt_out(block: Stack | Fuse, compositions: dict[str, Block]) -> Stack | Fuse:
    """`block` as it runs where the composed adapters `compositions` are loaded: a block
    spelt as one of them is that one (its parameters' name included), and the name of one
    stands for its whole block, as `hub fuse` and `hub train --stack` compose them; but a
    stacked adapter's name right after what it is stacked on is its own adapter
    (`Stack("lang", "task")`, spelt out, is the adapter task stacked on lang, not lang
    twice).

    Raises:
        ValueError: a block inside `block` spelt as several of them.
    """
    found = matching(block, compositions)
    if len(found) > 1:
        raise ValueError(f"{block} is {' and '.join(n for n, _ in found)}")
    if found:
        return found[0][1]
    children: list[Block] = []
    for child in block.children:
        if not isinstance(child, str):
            children.append(spelt_out(child, compositions))
            continue
        composed = compositions.get(child, child)
        below = (composed.children[:-1] if isinstance(composed, Stack)
                 and composed.children[-1] == child else None)
        on_what_it_is_stacked = (below is not None and isinstance(block, Stack)
                                 and tuple(children[-len(below):]) == below)
        children.append(child if on_what_it_is_stacked else composed)
    return Fuse(*children, name=block.label) if isinstance(block, Fuse) else Stack(*children)
