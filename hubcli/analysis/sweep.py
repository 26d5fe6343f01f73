"""A grid of training runs over bottleneck sizes and learning rates, resumable, best one kept.

Each run trains into OUT/runs/m<bottleneck>-lr<lr>; a run's folder appears only when it is
complete (adapter folders are written all or nothing), so a sweep stopped half way (Ctrl-C,
a crash) starts again where it stopped and never trusts a half-written run.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from hubcli.format import manifest as manifest_io
from hubcli.fsutil import atomic_write_text, staged_dir
from hubcli.local.train import TrainSettings, train


@dataclass
class SweepResult:
    runs: list[dict]        # one per grid point, best first: bottleneck, lr, share, metric, folder
    metric: str
    best: Path              # a copy of the best run's adapter folder


def run_folder(out: Path, bottleneck: int, lr: float) -> Path:
    return Path(out) / "runs" / f"m{bottleneck}-lr{lr:g}"


def sweep(settings: TrainSettings, bottlenecks: list[int], lrs: list[float], out: Path, *,
          log: Callable[[str], None] = lambda _m: None) -> SweepResult:
    """Train `settings` once per (bottleneck, lr), reusing finished runs; keep the best run (by
    the task's primary validation metric) as OUT/best and write OUT/sweep.json.

    Raises:
        UsageError: no validation data (a sweep compares validation scores).
        whatever `train` raises for a run (finished runs stay).
    """
    from hubcli.errors import UsageError

    if settings.validation is None:
        raise UsageError("a sweep compares validation scores: --validation is required",
                         hint="hold out part of the data and pass it as --validation")
    runs, grid = [], [(m, lr) for m in bottlenecks for lr in lrs]
    for k, (m, lr) in enumerate(grid, 1):
        folder = run_folder(out, m, lr)
        if (folder / manifest_io.MANIFEST).is_file():
            log(f"run {k}/{len(grid)}: bottleneck {m}, lr {lr:g}: finished before, kept")
        else:
            log(f"run {k}/{len(grid)}: bottleneck {m}, lr {lr:g}")
            train(replace(settings, out=folder, bottleneck=m, lr=lr), log=log)
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
