"""Plots of ablations, sweeps and training curves: PNG and SVG from matplotlib's headless Agg
backend, each with its numbers beside it (CSV), so a reader never has to guess a value."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from hubcli.analysis.ablation import Ablation


def require_matplotlib() -> None:
    """Raises UsageError: matplotlib is not installed (checked before any work is done)."""
    import importlib.util

    from hubcli.errors import UsageError

    try:
        found = importlib.util.find_spec("matplotlib") is not None
    except ValueError:  # a module set to None in sys.modules: not importable
        found = False
    if not found:
        raise UsageError("the plots need matplotlib, which is not installed",
                         hint='pip install -e ".[analysis]" (or pip install matplotlib)')


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display here, nor on servers
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, stem: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    for p in paths:
        fig.savefig(p, dpi=150, bbox_inches="tight")
    _pyplot().close(fig)
    return paths


def _write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def ablation_heatmap(a: Ablation, out: Path, title: str) -> list[Path]:
    """Houlsby et al.'s Fig. 6: the score with adapters removed from layers i..j (row: first
    layer removed, column: last), each cell labelled; the colour bar marks the full adapter and
    the majority class."""
    plt = _pyplot()
    n = len(a.spans)
    grid = [[float("nan") if v is None else v for v in row] for row in a.spans]
    fig, ax = plt.subplots(figsize=(1.0 + 0.75 * n, 0.8 + 0.65 * n))
    values = [v for row in a.spans for v in row if v is not None]
    # the colour bar spans the marks too: a mark outside the cells' range was clipped away
    marked = [a.full, *([a.majority] if a.majority is not None else [])]
    image = ax.imshow(grid, cmap="viridis", origin="upper", vmin=min(values + marked),
                      vmax=max(values + marked))
    middle = (a.full + min(values)) / 2
    for i in range(n):
        for j in range(i, n):
            ax.text(j, i, f"{a.spans[i][j]:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if a.spans[i][j] < middle else "black")
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
    ax.set_xlabel("last layer with adapters removed")
    ax.set_ylabel("first layer with adapters removed")
    bar = fig.colorbar(image, ax=ax, label=f"{a.metric} with the span removed")
    bar.ax.axhline(a.full, color="red", linewidth=2)
    marks = [(a.full, "full adapter")]
    if a.majority is not None:
        bar.ax.axhline(a.majority, color="black", linewidth=2, linestyle="--")
        marks.append((a.majority, "majority class"))
    ax.set_title(title + "\n" + ", ".join(f"{label} {v:.3f}" for v, label in marks), fontsize=9)
    paths = _save(fig, out, "ablation")
    rows = [[i, j, a.spans[i][j]] for i in range(n) for j in range(i, n)]
    return [*paths, _write_csv(out / "ablation.csv", ["first_layer", "last_layer", a.metric], rows)]


DROP_STEM = "adapterdrop"
DROP_FILES = tuple(f"{DROP_STEM}.{ext}" for ext in ("png", "svg", "csv"))  # `drop_plot`'s


def drop_plot(a: Ablation, out: Path, title: str) -> list[Path]:
    """AdapterDrop: the score and the inference speed against the lowest layers skipped."""
    plt = _pyplot()
    k = [d["dropped"] for d in a.drop or []]
    fig, left = plt.subplots(figsize=(6, 4))
    left.plot(k, [d[a.metric] for d in a.drop], "o-", color="tab:blue", label=a.metric)
    left.set_xlabel("lowest layers with adapters skipped")
    left.set_ylabel(a.metric, color="tab:blue")
    right = left.twinx()
    right.plot(k, [d["examples_per_s"] for d in a.drop], "s--", color="tab:orange")
    right.set_ylabel("inference speed (examples/s)", color="tab:orange")
    if a.majority is not None:
        left.axhline(a.majority, color="gray", linestyle=":", label="majority class")
        left.legend(loc="lower left")
    left.set_title(title, fontsize=9)
    paths = _save(fig, out, DROP_STEM)
    rows = [[d["dropped"], d[a.metric], d["examples_per_s"]] for d in a.drop]
    return [*paths, _write_csv(out / f"{DROP_STEM}.csv",
                               ["layers_skipped", a.metric, "examples_per_s"], rows)]


def training_curves(manifest: dict, out: Path) -> list[Path]:
    """Training loss and the validation metrics per evaluation, from a manifest's history:
    against the step where the run evaluated every N steps (`--eval-every`: its rows carry
    the step), else against the epoch."""
    plt = _pyplot()
    history = manifest.get("metrics", {}).get("validation") or []
    primary = manifest.get("metrics", {}).get("primary")
    axis = "step" if history and all("step" in row for row in history) else "epoch"
    xs = [row[axis] for row in history]
    fig, left = plt.subplots(figsize=(6, 4))
    left.plot(xs, [row["train_loss"] for row in history], "o-", color="tab:red")
    left.set_xlabel(axis)
    left.set_ylabel("training loss (mean per example)", color="tab:red")
    left.set_xticks(xs)
    keys = [k for k in history[0] if k not in ("epoch", "step", "train_loss")] if history else []
    if keys:
        right = left.twinx()
        for key in keys:
            right.plot(xs, [row[key] for row in history], "s--" if key == primary else ":",
                       label=key + (" (primary)" if key == primary else ""))
        right.set_ylabel("validation metric")
        right.legend(loc="center right")
    left.set_title(f"{manifest.get('name', 'adapter')} {manifest.get('version', '')}: training",
                   fontsize=9)
    paths = _save(fig, out, "training")
    header = ["epoch", *(["step"] if axis == "step" else []), "train_loss", *keys]
    rows = [[row.get(h) for h in header] for row in history]
    return [*paths, _write_csv(out / "training.csv", header, rows)]


def sweep_plot(runs: list[dict], metric: str, out: Path) -> list[Path]:
    """The sweep's score against the share of the base's parameters trained (log axis), one
    line per learning rate, as Houlsby et al. plot bottleneck sizes."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for lr in sorted({r["lr"] for r in runs}):
        mine = sorted((r for r in runs if r["lr"] == lr), key=lambda r: r["share"])
        ax.plot([100 * r["share"] for r in mine], [r[metric] for r in mine], "o-",
                label=f"lr {lr:g}")
        for r in mine:
            ax.annotate(f"m={r['bottleneck']}", (100 * r["share"], r[metric]), fontsize=7,
                        textcoords="offset points", xytext=(3, 3))
    ax.set_xscale("log")
    ax.set_xlabel("trained parameters (% of the base)")
    ax.set_ylabel(f"validation {metric}")
    ax.legend()
    ax.set_title("sweep", fontsize=9)
    paths = _save(fig, out, "sweep")
    header = ["bottleneck", "lr", "share", metric, "folder"]
    rows = [[r.get(h) for h in header] for r in runs]
    return [*paths, _write_csv(out / "sweep.csv", header, rows)]
