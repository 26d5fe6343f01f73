"""`hub export` and `hub import`: other formats in and out."""

from __future__ import annotations

from pathlib import Path

import click

from hubcli.cli.model_cmds import attach_options
from hubcli.cli.output import echo_json, notice


@click.command("export")
@click.argument("adapter", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["onnx", "adapters"]), required=True,
              help="onnx: base + adapter + head as one ONNX graph; adapters: a folder the "
                   "adapters library (AdapterHub) loads")
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="output file (onnx) or folder (adapters)")
@click.option("--drop-layernorm-deltas", is_flag=True,
              help="adapters: leave out the LayerNorm deltas, which that format cannot hold")
@click.option("--data", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="adapters: labelled dev data (format from its extension, default columns) "
                   "to measure what dropping the deltas changes")
@click.option("--overwrite", is_flag=True,
              help="replace an existing --out that an earlier export wrote")
@attach_options
@click.option("--json", "as_json", is_flag=True, help="print what was written as JSON")
def export_cmd(adapter, fmt, out, drop_layernorm_deltas, data, overwrite, as_json,
               **attach) -> None:
    """Export an adapter folder to another format."""
    from hubcli.errors import UsageError

    for option, given in (("--drop-layernorm-deltas", drop_layernorm_deltas), ("--data", data)):
        if given and fmt != "adapters":  # the ONNX graph holds the deltas as they are
            raise UsageError(f"{option} applies to --format adapters",
                             hint=f"drop {option}: the ONNX graph keeps the LayerNorm deltas")
    if data is not None and not drop_layernorm_deltas:
        raise UsageError("--data measures what dropping the LayerNorm deltas changes",
                         hint="pass --drop-layernorm-deltas with it, or drop --data")
    if fmt == "onnx":
        from hubcli.interop.onnx_export import check_onnx_out, export_onnx

        check_onnx_out(out, overwrite=overwrite)
        meta = export_onnx(adapter, out, notify=notice, **attach)
        if as_json:
            echo_json({"out": str(out), "format": fmt, **meta})
        else:
            click.echo(f"wrote {out} ({meta['task']}, base {meta['base']['name']})")
        return
    from hubcli.interop.adapters_export import check_library_out, export_adapters

    check_library_out(out, overwrite=overwrite)
    report = export_adapters(adapter, out, drop_layernorm_deltas=drop_layernorm_deltas, data=data,
                             notify=notice, **attach)
    if as_json:
        echo_json({"out": str(out), "format": fmt, **{k: v for k, v in vars(report).items()
                                                       if k != "out"}})
        return
    if report.metric is not None:
        click.echo(f"dev {report.metric}: {report.with_deltas:.4f} with the LayerNorm deltas, "
                   f"{report.without_deltas:.4f} without "
                   f"({report.without_deltas - report.with_deltas:+.4f})")
    click.echo(f"wrote {out}" + (" (LayerNorm deltas dropped)" if report.dropped_layernorm else "")
               + "; load it with load_adapter(DIR, use_safetensors=True)")


@click.command("import")
@click.argument("src")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="output folder")
@click.option("--base", help="base model folder or Hub id (default: the config's model_name)")
@click.option("--name", help="adapter name [default: the one it was saved under]")
@click.option("--overwrite", is_flag=True,
              help="replace an existing --out that hub train or hub import wrote")
@click.option("--json", "as_json", is_flag=True, help="print the manifest as JSON")
def import_cmd(src, out, base, name, overwrite, as_json) -> None:
    """Import an adapter saved by the `adapters` library (AdapterHub) as an adapter folder:
    SRC is the folder save_adapter wrote, or hf://NS/NAME[@REVISION] on the Hugging Face Hub."""
    from hubcli.interop.adapters_import import import_adapters
    from hubcli.local.options import check_out

    check_out(out, overwrite=overwrite)
    manifest = import_adapters(src, out, base=base, name=name, notify=notice)
    if as_json:
        echo_json(manifest)
    else:
        click.echo(f"wrote {out} ({manifest['architecture']['type']}, {manifest['task']})")
