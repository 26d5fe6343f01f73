"""`hub train --nproc N`: start N data parallel training processes with torchrun and hand back
rank 0's result, as if one process had trained.

The settings travel to the workers as a pickle in a private temp folder (`python -m
hubcli.local.launch SETTINGS RESULT` under torchrun; each worker is one rank, see
local/distributed.py); rank 0 writes back its TrainResult, or the error that stopped it, which
is raised here as the same one-line error.

torchrun and its workers run in a session of their own, and SIGINT or SIGTERM reaching this
process is passed on to torchrun, once per signal, which passes it to every worker: each
finishes its step, rank 0 writes the checkpoint and says so, and this process waits for them
all. (In one process group, a terminal's Ctrl-C reached each of them and torchrun again,
and SIGTERM to this process alone left them all training.) SIGHUP (the terminal closed) and
SIGQUIT are passed on too, and stop the workers as they stop one process: at once, with no
checkpoint; outside the terminal's session, nothing else would reach them. A signal this
process ignores (`nohup`) is not passed on: the run outlives the terminal, as one process does.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from hubcli.errors import HubError, OptionError
from hubcli.local.distributed import from_environment
from hubcli.local.options import check_settings
from hubcli.local.train import TrainResult, TrainSettings, train

# What a terminal, a shell or a supervisor sends to stop a run: torchrun and its workers,
# in a session of their own, get each only from here.
PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def launch(s: TrainSettings, nproc: int) -> TrainResult:
    """Train with `nproc` processes on this machine (gloo on the CPU, NCCL on GPUs).

    Raises:
        OptionError: `nproc` < 1, already inside a distributed run, or see check_settings
            (checked here first, so a bad option starts no process).
        HubError: what stopped rank 0 (its message and hint), or a worker that died.
    """
    if nproc < 1:
        raise OptionError("--nproc", nproc, "must be 1 or more", hint="e.g. --nproc 2")
    if from_environment().world > 1:
        raise OptionError("--nproc", nproc, "inside a distributed run (torchrun started this)",
                          hint="drop --nproc: torchrun starts the processes already")
    check_settings(s)
    with tempfile.TemporaryDirectory(prefix="hub-train-") as tmp:
        settings, result = Path(tmp) / "settings.pkl", Path(tmp) / "result.pkl"
        settings.write_bytes(pickle.dumps(replace(s, out=Path(s.out).absolute())))
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc-per-node={nproc}", "-m", "hubcli.local.launch", str(settings),
                   str(result)]
        torchrun = subprocess.Popen(command, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                    start_new_session=True)
        with _passed_on(torchrun):
            code = torchrun.wait()
        if not result.exists():
            raise HubError(f"a training process failed (torchrun exit status {code})",
                           hint="see the messages above; HUB_DEBUG=1 shows tracebacks")
        kind, *value = pickle.loads(result.read_bytes())
    if kind == "error":
        raise HubError(value[0], hint=value[1])
    return value[0]


@contextmanager
def _passed_on(child: subprocess.Popen) -> Iterator[None]:
    """While inside, the signals that stop a process (`PASSED_ON`) are sent on to `child`
    instead of stopping this one, but for those this process ignores (on the main thread;
    elsewhere signals cannot be caught, and nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # one this process ignores (SIGHUP under nohup; SIGINT, SIGQUIT in a script's `cmd &`)
    # stays ignored: passed on, it would stop the run that was meant to outlive it
    kept = {sig: handler for sig in PASSED_ON
            if (handler := signal.getsignal(sig)) is not signal.SIG_IGN}
    for sig in kept:
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    try:
        yield
    finally:
        for sig, handler in kept.items():
            signal.signal(sig, handler)


def _worker(settings: Path, result: Path) -> None:
    """One rank: train, and on rank 0 write the result (or the error) for `launch`."""
    from hubcli.fsutil import atomic_write_bytes

    s = pickle.loads(settings.read_bytes())
    main = from_environment().is_main
    try:
        log = (lambda _m: None) if s.quiet else (lambda m: print(m, file=sys.stderr))
        outcome: tuple = ("ok", train(s, log=log))
    except HubError as e:
        outcome = ("error", str(e), e.hint)
    if main:
        atomic_write_bytes(result, pickle.dumps(outcome))


if __name__ == "__main__":
    _worker(Path(sys.argv[1]), Path(sys.argv[2]))
