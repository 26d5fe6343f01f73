"""Training precision: fp32, or bf16 matrix products under autocast.

With bf16 autocast the weights, optimiser state, LayerNorms, softmax and loss stay float32;
only the matrix products run in bfloat16, which CPUs with AVX512-BF16 or AMX execute at about
twice the float32 rate (1.7x faster adapter steps on MiniLM, the same dev accuracy and NER F1;
see README, "Performance"). `auto` picks bf16 only where the CPU has those instructions, since
emulated bf16 is slower than float32. Evaluation and prediction always run in float32.
"""

from __future__ import annotations

import contextlib

from hubcli.errors import UsageError

CHOICES = ("auto", "fp32", "bf16")


def native_bf16() -> bool:
    """True when this CPU multiplies bf16 matrices in hardware."""
    import torch

    cpu = torch.cpu
    return bool(cpu._is_avx512_bf16_supported() or cpu._is_amx_tile_supported())


def resolve(choice: str) -> str:
    """'fp32' or 'bf16' for a user's choice.

    Raises:
        UsageError: an unknown choice.
    """
    if choice not in CHOICES:
        raise UsageError(f"precision {choice!r} is not one of {', '.join(CHOICES)}")
    if choice == "auto":
        return "bf16" if native_bf16() else "fp32"
    return choice


def autocast(precision: str):
    """The context a training step's forward pass runs in."""
    import torch

    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()
