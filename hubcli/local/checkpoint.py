"""Checkpoints of a training run, and stopping cleanly on SIGINT/SIGTERM.

A checkpoint is one file beside the output folder (`<out>.ckpt`), written atomically
(`fsutil.atomic_writer`: a crash mid-write leaves the previous one), holding everything the
next step depends on: the trainable weights, the optimiser, scheduler and gradient-scaler
states, the RNG states, the data position (epoch and batch: the batch order is replayed from
the seed) and the loop's bookkeeping (history, best weights, patience). `--resume` loads it and
the run continues as if never stopped: the same weights, to float rounding, as an uninterrupted
run. It is removed once the trained folder is written.

It is read with `torch.load(weights_only=True)`: tensors, numbers, strings and containers only,
so a checkpoint file cannot run code.
"""

from __future__ import annotations

import random
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hubcli.errors import HubError, OptionError
from hubcli.fsutil import atomic_writer

VERSION = 1


def path_for(out: Path) -> Path:
    """Where the checkpoint of a run writing `out` lives: beside it, `<out>.ckpt`."""
    out = Path(out)
    return out.with_name(out.name + ".ckpt")


def rng_states() -> dict[str, Any]:
    import torch

    states = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng(states: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(states["torch"])
    random.setstate(_as_tuple(states["python"]))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def _as_tuple(value):
    # torch.load gives tuples back as tuples, but be lenient with lists
    return tuple(_as_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value


# Settings `loop.fingerprint` leaves out at these values: a checkpoint without one had it
OMITTED_AT = {"reads": "output", "skip": "output", "layernorm": "delta"}


def save(path: Path, state: dict[str, Any]) -> None:
    """Write `state` (plus the format version) to `path` atomically."""
    import torch

    with atomic_writer(Path(path)) as f:
        torch.save({"version": VERSION, **state}, f)


def load(path: Path, fingerprint: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint at `path`, checked to come from a run with the same `fingerprint` (the
    settings and data that decide every step).

    Raises:
        OptionError: no checkpoint there, it is unreadable, or it belongs to a run with other
            settings or data (each difference named).
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise OptionError("--resume", path, "no checkpoint there",
                          hint="train without --resume (with --checkpoint-every N to write one)")
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as e:  # a torn or foreign file: torch raises many kinds
        raise OptionError("--resume", path, f"not a readable checkpoint ({e})",
                          hint="remove it and train without --resume") from None
    if state.get("version") != VERSION:
        raise OptionError("--resume", path, f"checkpoint format {state.get('version')!r} is not "
                          f"{VERSION}", hint="remove it and train without --resume")
    # both sides at the defaults they omit, so a setting left out on either side still counts
    recorded, now = {**OMITTED_AT, **state["fingerprint"]}, {**OMITTED_AT, **fingerprint}
    changed = [f"{k} was {recorded.get(k)!r}, now {now.get(k)!r}"
               for k in dict.fromkeys([*now, *recorded]) if recorded.get(k) != now.get(k)]
    if changed:
        raise OptionError("--resume", path, "the checkpoint is from a run with other settings: "
                          + "; ".join(changed),
                          hint="resume with the options of the run that wrote it, or remove it")
    return state


class TrainingStopped(HubError):
    """SIGINT or SIGTERM stopped training after a step; a checkpoint was written."""

    def __init__(self, signal_name: str, step: int, total: int, path: Path) -> None:
        super().__init__(f"training stopped by {signal_name} after step {step} of {total}; "
                         f"checkpoint written to {path}",
                         hint="run the same command with --resume to continue")
        self.path = path


@contextmanager
def stop_requests() -> Iterator[list[int]]:
    """While inside, SIGINT and SIGTERM do not kill the process but are noted in the yielded
    list (the loop checks it after each step, writes a checkpoint and stops). A second SIGINT
    interrupts at once. Signals can only be caught on the main thread; elsewhere nothing
    changes."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def note(signum, _frame):
        if signum == signal.SIGINT and received:
            raise KeyboardInterrupt
        received.append(signum)

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
