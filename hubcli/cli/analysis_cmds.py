"""`hub sweep`, `hub ablate`, `hub plot`: what adapters do, in tables and pictures."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from hubcli.cli.model_cmds import TASK_CHOICES, attach_options, column_options, columns
from hubcli.cli.output import echo_json, notice, table
from hubcli.errors import OptionError


def _numbers(option: str, value: str, kind: type) -> list:
    """'8,64,256' -> [8, 64, 256], each positive.

    Raises:
        OptionError: not a comma-separated list of positive numbers.
    """
    try:
        out = [kind(v) for v in value.split(",") if v.strip()]
    except ValueError:
        out = []
    if not out or any(not 0 < v < math.inf for v in out):  # also refuses nan
        raise OptionError(option, value, f"is not a comma-separated list of positive "
                          f"{'integers' if kind is int else 'numbers'}",
                          hint=f"e.g. {option} {'8,64,256' if kind is int else '3e-4,1e-3'}")
    return out


def _output_folder(out: Path, adapter: Path | None = None) -> Path:
    """`out`, checked before any work: a folder (made if missing), outside `adapter`'s.

    Raises:
        OptionError: `out` is a file, or the adapter folder or inside it (which takes no
            extra files: they would fail its signature and bundle checks).
    """
    if out.exists() and not out.is_dir():
        raise OptionError("--out", out, "is a file, not a folder",
                          hint="name a folder (it is made if missing)")
    if adapter is not None and adapter.resolve() in (out.resolve(), *out.resolve().parents):
        raise OptionError("--out", out, f"is inside the adapter folder {adapter}, which takes "
                          "no extra files (its signature and bundle list what it holds)",
                          hint="name a folder outside it")
    return out


@click.command("sweep")
@click.option("--task", type=click.Choice(TASK_CHOICES), default="classification", show_default=True)
@click.option("--train", "train_path", required=True, type=click.Path(path_type=Path))
@click.option("--validation", required=True, type=click.Path(path_type=Path))
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="sweep folder: runs/, best/, sweep.json, sweep.csv and the plot")
@column_options
@click.option("--base", help="base model folder or Hub id (default: packaged all-MiniLM-L6-v2)")
@click.option("--bottleneck", "bottlenecks", default="8,64,256", show_default=True,
              help="bottleneck sizes to try, comma-separated")
@click.option("--lr", "lrs", default="3e-4,1e-3", show_default=True,
              help="learning rates to try, comma-separated")
@click.option("--epochs", type=click.IntRange(min=1), help="per run [default: as hub train]")
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--max-length", type=click.IntRange(min=8), default=128, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--quiet", is_flag=True, help="no progress bars")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
def sweep_cmd(train_path, validation, out, fmt, text_column, text_pair_column, label_column,
              bottlenecks, lrs, as_json, **opts) -> None:
    """Train a grid of adapters (bottleneck x learning rate); keep the best. Resumable: run it
    again after a stop and finished runs are kept."""
    from hubcli.analysis.plots import require_matplotlib, sweep_plot
    from hubcli.analysis.sweep import sweep
    from hubcli.local.train import TrainSettings

    grid_m, grid_lr = _numbers("--bottleneck", bottlenecks, int), _numbers("--lr", lrs, float)
    require_matplotlib()
    settings = TrainSettings(train=train_path, validation=validation, out=out, fmt=fmt,
                             columns=columns(text_column, text_pair_column, label_column), **opts)
    result = sweep(settings, grid_m, grid_lr, out, log=notice)
    plots = sweep_plot(result.runs, result.metric, out)
    if as_json:
        echo_json({"metric": result.metric, "best": str(result.best), "runs": result.runs,
                   "plots": [str(p) for p in plots]})
        return
    table(["bottleneck", "lr", "params %", result.metric],
          [[r["bottleneck"], f"{r['lr']:g}", f"{100 * r['share']:.2f}", r[result.metric]]
           for r in result.runs])
    click.echo(f"best kept in {result.best}; plot: {plots[0]}")


@click.command("ablate")
@click.argument("adapter", type=click.Path(path_type=Path))
@click.option("--data", required=True, type=click.Path(path_type=Path), help="labelled data file")
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="folder for ablation.json, the heatmap (PNG, SVG) and its CSV")
@click.option("--drop-lowest", type=click.IntRange(min=0),
              help="also skip the adapters of the lowest 0..K layers (AdapterDrop): score and "
                   "speed per K")
@click.option("--record", is_flag=True,
              help="also write the result into the adapter's manifest (`analysis`), for its "
                   "model card and registry page; its signature is removed: bundle and sign again")
@column_options
@attach_options
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
def ablate_cmd(adapter, data, out, drop_lowest, record, fmt, text_column, text_pair_column,
               label_column, as_json, **attach) -> None:
    """Score an adapter with its adapters removed from every span of layers (Houlsby et al.,
    Fig. 6), LayerNorm deltas and head kept."""
    from hubcli.analysis.ablation import ablate
    from hubcli.analysis.plots import DROP_FILES, ablation_heatmap, drop_plot, require_matplotlib
    from hubcli.fsutil import atomic_write_text
    from hubcli.local.inference import load_predictor

    require_matplotlib()
    _output_folder(out, adapter)
    predictor = load_predictor(adapter, notify=notice, **attach)
    examples = predictor.task.read(data, fmt=fmt,
                                   columns=columns(text_column, text_pair_column, label_column))
    result = ablate(predictor, examples, drop_lowest=drop_lowest, progress=notice)
    out.mkdir(parents=True, exist_ok=True)  # the scores first: a plot failing loses none
    atomic_write_text(out / "ablation.json", json.dumps(result.to_json(), indent=2) + "\n")
    title = f"{adapter.name} on {data.name}: adapters removed from layers i..j"
    files = ablation_heatmap(result, out, title)
    if result.drop is not None:
        files += drop_plot(result, out, f"{adapter.name} on {data.name}: AdapterDrop")
    else:  # an earlier run's, which ablation.json no longer speaks for
        for name in DROP_FILES:
            (out / name).unlink(missing_ok=True)
    if record:
        _record(adapter, {"data": data.name, **result.to_json()})
    if as_json:
        echo_json({**result.to_json(), "files": [str(f) for f in files]})
        return
    n = len(result.spans)
    click.echo(f"{result.metric}: full adapter {result.full:.4f}, all layers removed "
               f"{result.spans[0][n - 1]:.4f}" + (f", majority class {result.majority:.4f}"
                                                  if result.majority is not None else ""))
    table(["layer removed", result.metric], [[i, result.spans[i][i]] for i in range(n)])
    click.echo(f"wrote {out / 'ablation.json'} and {files[0]}")


@click.command("plot")
@click.argument("adapter", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path),
              help="folder for training.png/.svg/.csv [default: ADAPTER-plots beside the "
                   "adapter folder, which takes no extra files]")
def plot_cmd(adapter, out) -> None:
    """Training curves of an adapter folder: loss and validation metrics per epoch (per step
    for a run that evaluated every N steps)."""
    from hubcli.analysis.plots import require_matplotlib, training_curves
    from hubcli.errors import UsageError
    from hubcli.format import manifest as manifest_io

    require_matplotlib()
    manifest = manifest_io.read(adapter)
    if not manifest.get("metrics", {}).get("validation"):
        raise UsageError(f"{adapter} records no training history",
                         hint="train with --validation to get per-epoch curves")
    folder = adapter.resolve()
    out = _output_folder(out or folder.parent / f"{folder.name}-plots", adapter)
    files = training_curves(manifest, out)
    click.echo(f"wrote {files[0]}, {files[1]} and {files[2]}")


def _record(adapter: Path, ablation: dict) -> None:
    """Put `ablation` into the adapter's manifest, removing the signature of the old one.

    Raises:
        ManifestError: the result does not fit the schema (nothing is written).
    """
    from hubcli.format import manifest as manifest_io
    from hubcli.format.bundle_rules import SIGNATURE

    manifest = manifest_io.read(adapter)
    manifest["analysis"] = {**manifest.get("analysis", {}), "ablation": ablation}
    manifest_io.write(adapter, manifest)
    notice(f"recorded the ablation in {adapter / manifest_io.MANIFEST}")
    signature = adapter / SIGNATURE
    if signature.exists():  # it covered the old manifest: kept, it would only fail verification
        signature.unlink()
        notice(f"removed {signature}, which signed the old manifest; run `hub bundle {adapter}` "
               f"and `hub sign {adapter}` to refresh the card and sign again")
