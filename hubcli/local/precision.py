"""Training precision: fp32, or bf16/fp16 matrix products under autocast.

With autocast the weights, optimiser state, LayerNorms, softmax and loss stay float32; only
the matrix products run in 16 bits. On the CPU, bf16 runs at about twice the float32 rate on
CPUs with AVX512-BF16 or AMX (1.7x faster adapter steps on MiniLM, the same dev accuracy and NER
F1; see README, "Performance"), so `auto` picks it only there: emulated bf16 is slower than
float32. On CUDA, `auto` picks bf16 where the GPU supports it (Ampere and later) and otherwise
fp16, whose narrow exponent needs a gradient scaler (`grad_scaler`). Evaluation and prediction
always run in float32.
"""

from __future__ import annotations

import contextlib

from hubcli.errors import UsageError

CHOICES = ("auto", "fp32", "bf16", "fp16")
# Which explicit choices each device kind runs (MPS autocast is left out: fp32 there).
SUPPORTED = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16", "fp16"), "mps": ("fp32",)}


def native_bf16() -> bool:
    """True when this CPU multiplies bf16 matrices in hardware."""
    import torch

    cpu = torch.cpu
    return bool(cpu._is_avx512_bf16_supported() or cpu._is_amx_tile_supported())


def cuda_bf16() -> bool:
    """True when the current CUDA GPU runs bf16 natively."""
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def choose(choice: str, device_kind: str, *, cpu_bf16: bool, gpu_bf16: bool) -> str:
    """The precision for a user's choice on a device kind, given what the hardware does.

    Raises:
        UsageError: an unknown choice, or one the device kind does not run (fp16 on the CPU).
    """
    if choice not in CHOICES:
        raise UsageError(f"precision {choice!r} is not one of {', '.join(CHOICES)}")
    if choice == "auto":
        if device_kind == "cuda":
            return "bf16" if gpu_bf16 else "fp16"
        return "bf16" if device_kind == "cpu" and cpu_bf16 else "fp32"
    allowed = SUPPORTED[device_kind]
    if choice not in allowed:
        raise UsageError(f"precision {choice!r} does not run on {device_kind}",
                         hint=f"on {device_kind} use {', '.join(allowed)} or auto")
    return choice


def resolve(choice: str, device_kind: str = "cpu") -> str:
    """'fp32', 'bf16' or 'fp16' for a user's choice on this machine's `device_kind`.

    Raises:
        UsageError: see `choose`.
    """
    return choose(choice, device_kind,
                  cpu_bf16=device_kind == "cpu" and choice == "auto" and native_bf16(),
                  gpu_bf16=device_kind == "cuda" and choice == "auto" and cuda_bf16())


def autocast(precision: str, device_kind: str = "cpu"):
    """The context a training step's forward pass runs in."""
    import torch

    if precision in ("bf16", "fp16"):
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        return torch.autocast(device_kind, dtype=dtype)
    return contextlib.nullcontext()


def grad_scaler(precision: str, device_kind: str = "cpu"):
    """A gradient scaler: active for fp16 (small gradients would flush to zero), a pass-through
    otherwise."""
    import torch

    return torch.amp.GradScaler(device_kind, enabled=precision == "fp16")
