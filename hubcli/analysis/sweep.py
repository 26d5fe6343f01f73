"""A grid of training runs over bottleneck sizes and learning rates, resumable, best one kept.

Each run trains into OUT/runs/m<bottleneck>-lr<lr>; a run's folder appears only when it is
complete (adapter folders are written all or nothing), so a sweep stopped half way (Ctrl-C,
a crash) starts again where it stopped and never trusts a half-written run: a run stopped by
a signal resumes from the checkpoint it wrote. OUT/sweep-settings.json records what decides
every run besides its grid point (the data by digest), so runs are only ever kept for a
sweep with the same.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

from hubcli.errors import OptionError
from hubcli.format import manifest as manifest_io
from hubcli.fsutil import atomic_write_text, sha256_file, staged_dir
from hubcli.local import checkpoint
from hubcli.local.options import check_writable
from hubcli.local.train import TrainSettings, train
from hubcli.tasks.base import readable

SETTINGS = "sweep-settings.json"
# TrainSettings that do not change a run's result (or are the grid's, or the run's folder)
_INCIDENTAL = frozenset({"out", "bottleneck", "lr", "device", "checkpoint_every", "resume",
                         "log_every", "log_json", "quiet", "overwrite", "name", "version",
                         "description", "allow_unsigned"})


@dataclass
class SweepResult:
    runs: list[dict]        # one per grid point, best first: bottleneck, lr, share, metric, folder
    metric: str
    best: Path              # a copy of the best run's adapter folder


def run_folder(out: Path, bottleneck: int, lr: float) -> Path:
    """The run's folder: the lr as Python spells it, so two grid values never share one."""
    return Path(out) / "runs" / f"m{bottleneck}-lr{lr!r}"


def sweep(settings: TrainSettings, bottlenecks: list[int], lrs: list[float], out: Path, *,
          log: Callable[[str], None] = lambda _m: None) -> SweepResult:
    """Train `settings` once per (bottleneck, lr), reusing finished runs; keep the best run (by
    the task's primary validation metric) as OUT/best and write OUT/sweep.json.

    Raises:
        UsageError: no validation data (a sweep compares validation scores).
        OptionError: `out` is a file, or holds runs of a sweep with other settings, or
            unrecorded ones.
        DataError: a data file is missing or unreadable.
        TrainingStopped: a signal stopped a run (its checkpoint kept: the same sweep resumes).
        whatever `train` raises for a run (finished runs stay).
    """
    from hubcli.errors import UsageError

    if settings.validation is None:
        raise UsageError("a sweep compares validation scores: --validation is required",
                         hint="hold out part of the data and pass it as --validation")
    _check_settings(settings, Path(out))
    runs, grid = [], list(dict.fromkeys((m, lr) for m in bottlenecks for lr in lrs))
    for k, (m, lr) in enumerate(grid, 1):
        folder = run_folder(out, m, lr)
        said = f"run {k}/{len(grid)}: bottleneck {m}, lr {lr:g}"
        if (folder / manifest_io.MANIFEST).is_file():
            log(f"{said}: finished before, kept")
        else:
            stopped = checkpoint.path_for(folder).is_file()  # by a signal: its checkpoint
            log(said + (": resuming where it was stopped" if stopped else ""))
            try:
                train(replace(settings, out=folder, bottleneck=m, lr=lr, resume=stopped),
                      log=log)
            except checkpoint.TrainingStopped as err:
                err.hint = ("run the same hub sweep again: finished runs are kept, and this "
                            "one resumes from its checkpoint")
                raise
        runs.append(_row(folder, m, lr))
    metric = {r.pop("metric_name") for r in runs}.pop()  # one task, so one primary metric
    runs.sort(key=lambda r: r[metric], reverse=True)
    best = Path(out) / "best"
    with staged_dir(best) as tmp:
        shutil.copytree(runs[0]["folder"], tmp, dirs_exist_ok=True)
    atomic_write_text(Path(out) / "sweep.json", json.dumps(
        {"metric": metric, "best": str(best), "runs": runs}, indent=2) + "\n")
    return SweepResult(runs, metric, best)


def _row(folder: Path, bottleneck: int, lr: float) -> dict:
    m = manifest_io.read(folder)
    metric = m["metrics"]["primary"]
    return {"bottleneck": bottleneck, "lr": lr, "share": m["parameters"]["share"],
            metric: m["metrics"]["best"][metric], "metric_name": metric, "folder": str(folder)}


def _check_settings(settings: TrainSettings, out: Path) -> None:
    """Record what decides the runs in `out`, or check it is what the runs kept there (finished,
    or stopped with a checkpoint) were trained with. With none kept, the record is the new
    settings' whatever it said: a sweep that failed before any run finished (a mistyped
    column) is simply run again.

    Raises:
        OptionError: `out` is a file, in one, or where nothing can be written; records other
            settings than its kept runs' (each difference named), or holds finished runs and
            no record of theirs.
        DataError: a data file is missing or unreadable.
    """
    if out.exists() and not out.is_dir():
        raise OptionError("--out", out, "is a file, not a folder",
                          hint="name a folder (it is made if missing)")
    check_writable(out)
    now, record = _decisive(settings), out / SETTINGS
    finished = any((out / "runs").glob(f"*/{manifest_io.MANIFEST}"))
    stopped = any((out / "runs").glob(checkpoint.path_for(Path("*")).name))  # <run>.ckpt
    if record.is_file() and (finished or stopped):
        before = json.loads(record.read_text(encoding="utf-8"))
        changed = [f"{k} was {before.get(k)!r}, now {now.get(k)!r}"
                   for k in dict.fromkeys([*before, *now]) if before.get(k) != now.get(k)]
        if changed:
            raise OptionError("--out", out, "holds the runs of a sweep with other settings: "
                              + "; ".join(changed),
                              hint="give another --out, or that sweep's options to go on "
                                   "with it")
        return
    if finished and not record.is_file():
        raise OptionError("--out", out, f"holds runs and no {SETTINGS} saying what they "
                          "were trained with", hint="give another --out, or remove "
                          f"{out / 'runs'} to train them again")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(record, json.dumps(now, indent=2) + "\n")


def _decisive(settings: TrainSettings) -> dict[str, Any]:
    """The settings that decide a run's result besides its grid point, as JSON: the data
    files by name and digest.

    Raises:
        DataError: a data file is missing or unreadable.
    """
    plain = json.loads(json.dumps({k: v for k, v in asdict(settings).items()
                                   if k not in _INCIDENTAL}, default=str))
    for key in ("train", "validation"):
        path = Path(getattr(settings, key))
        with readable(path):
            plain[key] = {"name": path.name, "sha256": sha256_file(path)}
    return plain
