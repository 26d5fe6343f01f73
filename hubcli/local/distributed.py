"""Data parallel training on `torch.distributed`: one process per CPU share or GPU.

A run is distributed when torchrun's environment says so (`WORLD_SIZE` > 1), whether the user
ran `torchrun --nproc-per-node N -m hubcli train ...` or `hub train --nproc N` (which runs
torchrun for them, `launch`). Every rank builds the same model from the same seed and draws the
same batches; each runs the forward and backward pass of its own shard of every batch
(`Group.shard`), and after a step's micro-batches one all-reduce sums the gradients of the
trainable parameters only (the frozen base never needs syncing), together with the step's loss
and any rank's stop request. Each shard's loss is weighted by its share of the step's examples,
so the summed gradient is the mean over the whole global batch: the same step a single process
takes. Rank 0 evaluates, logs and writes; the others wait at the next all-reduce.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Group:
    """This process's place in the run: rank `rank` of `world` (a single process: 0 of 1)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, batch: Sequence) -> list:
        """This rank's part of a batch every rank drew alike: every world-th example."""
        return list(batch[self.rank::self.world])

    def sum(self, flat):
        """`flat` (a 1-D tensor) summed over the ranks, in place; itself for one process."""
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        return flat

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()


def from_environment() -> Group:
    """The group torchrun's variables describe (RANK, WORLD_SIZE, LOCAL_RANK); one process
    without them."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Group()
    return Group(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))


def start(group: Group, device: str) -> None:
    """Join the process group: NCCL between GPUs, gloo on the CPU. Nothing for one process."""
    if group.world <= 1:
        return
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(device)
        dist.init_process_group(backend)


def stop(group: Group) -> None:
    if group.world > 1:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
