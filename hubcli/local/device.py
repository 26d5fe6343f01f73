"""Where a model runs: `--device auto|cpu|cuda|cuda:N|mps` as a torch device name.

Availability is asked of torch through `cuda_count` and `mps_available` only, so the choice
logic is tested on any machine by replacing those two.
"""

from __future__ import annotations

import re

from hubcli.errors import OptionError

CHOICES_HELP = "auto (cuda, else mps, else cpu), cpu, cuda, cuda:N or mps"
_CUDA = re.compile(r"cuda(?::(\d+))?")


def cuda_count() -> int:
    """How many CUDA GPUs torch can use here (0 on a CPU-only build)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def mps_available() -> bool:
    """True on an Apple GPU with torch's MPS backend."""
    import torch

    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def resolve(choice: str, *, local_rank: int = 0) -> str:
    """'cpu', 'cuda:N' or 'mps' for what a user typed. `auto` and a bare `cuda` take GPU
    `local_rank` (a distributed run puts one process on each GPU).

    Raises:
        OptionError: the device is not one of the choices, or this machine does not have it
            (the message names the device and what the machine has).
    """
    choice = choice.strip().lower()
    if choice == "auto":
        if cuda_count():
            return _cuda(choice, local_rank)
        return "mps" if mps_available() else "cpu"
    if choice == "cpu":
        return "cpu"
    if choice == "mps":
        if not mps_available():
            raise OptionError("--device", choice, "no Apple GPU (MPS) is available here",
                              hint="use --device cpu, or --device auto to take what there is")
        return "mps"
    match = _CUDA.fullmatch(choice)
    if match is None:
        raise OptionError("--device", choice, "is not a device", hint=f"use {CHOICES_HELP}")
    return _cuda(choice, local_rank if match.group(1) is None else int(match.group(1)))


def _cuda(choice: str, index: int) -> str:
    count = cuda_count()
    if count == 0:
        raise OptionError("--device", choice, "no CUDA GPU is available here (torch sees none)",
                          hint="use --device cpu or auto; for a GPU, check nvidia-smi and that "
                               "torch was installed with CUDA")
    if index >= count:
        raise OptionError("--device", choice, f"this machine has {count} CUDA GPU(s), "
                          f"numbered 0-{count - 1}", hint=f"use cuda:0 to cuda:{count - 1}")
    return f"cuda:{index}"


def kind(device: str) -> str:
    """'cpu', 'cuda' or 'mps': what autocast and the manifest call a device."""
    return device.partition(":")[0]
