"""`hub train`, `hub eval`, `hub predict`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from hubcli.local import precision
from hubcli.cli.output import echo_json, echo_text, notice, notice_once, table
from hubcli.errors import OptionError, UsageError
from hubcli.fsutil import expanded, is_dir
from hubcli.format.vocab import HOULSBY_TAPS, LAYERNORM_MODES, TASKS

TASK_CHOICES = list(TASKS)


def parse_layers(value: str | None) -> tuple[int, ...] | None:
    """'all', '0-5', '0,2,4' or '0-2,5' -> layer indices (None means all)."""
    if value is None or value == "all":
        return None
    out: list[int] = []
    try:
        for part in value.split(","):
            lo, _, hi = part.partition("-")
            out += range(int(lo), int(hi or lo) + 1)
    except ValueError:
        raise UsageError(f"--layers {value!r} is not a layer list",
                         hint="use e.g. 'all', '0-5', '0,2,4' or '0-2,5'") from None
    if not out:
        raise OptionError("--layers", value, "selects no layer (a range runs low-high)",
                          hint="use e.g. 'all', '0-5', '0,2,4' or '0-2,5'")
    return tuple(out)


def columns(text: str | None, pair: str | None, label: str | None):
    from hubcli.tasks.base import Columns

    return Columns(text=text, pair=pair, label=label)


def column_options(f):
    for opt in reversed([
        click.option("--format", "fmt", help="csv, tsv, jsonl, conll or squad (default: from extension)"),
        click.option("--text-column", help="column holding the text (default: sentence/text/...)"),
        click.option("--text-pair-column", help="second text of a pair task (e.g. sentence2)"),
        click.option("--label-column", help="column holding the label (default: label/score)"),
    ]):
        f = opt(f)
    return f


def output_options(f):
    for opt in reversed([
        click.option("--name", help="adapter name [default: the output folder's name]"),
        click.option("--version", "version", default="0.1.0", show_default=True),
        click.option("--description", help="one-line description for the model card"),
        click.option("--quiet", is_flag=True, help="no progress bars"),
        click.option("--json", "as_json", is_flag=True, help="print the result as JSON"),
    ]):
        f = opt(f)
    return f


def attach_options(f):
    for opt in reversed([
        click.option("--base", help="base model folder or Hub id (default: the adapter's own base)"),
        click.option("--allow-base-mismatch", is_flag=True,
                     help="attach even if the base's content hash differs from the manifest's"),
        click.option("--allow-unsigned", is_flag=True,
                     help="attach an unsigned or untrusted adapter (with a warning)"),
    ]):
        f = opt(f)
    return f


def loop_options(f):
    """How `hub train` and `hub fuse` step, evaluate, log and checkpoint."""
    for opt in reversed([
        click.option("--grad-accum", type=click.IntRange(min=1), default=1, show_default=True,
                     help="batches per optimiser step (a step's global batch: batch size x "
                          "this)"),
        click.option("--max-steps", type=click.IntRange(min=1),
                     help="train this many optimiser steps instead of --epochs"),
        click.option("--eval-every", type=click.IntRange(min=1),
                     help="evaluate every N steps (keeping the best) [default: after every "
                          "epoch]"),
        click.option("--patience", type=click.IntRange(min=1),
                     help="stop after N evaluations without a better score (needs "
                          "--validation)"),
        click.option("--log-json", type=click.Path(path_type=Path, dir_okay=False),
                     help="append one JSON line per logging step (and per evaluation) to "
                          "this file"),
        click.option("--log-every", type=click.IntRange(min=1), default=10, show_default=True,
                     help="steps between --log-json lines"),
        click.option("--checkpoint-every", type=click.IntRange(min=1),
                     help="write a checkpoint (OUT.ckpt) every N steps; one is also written "
                          "on Ctrl-C/SIGTERM"),
        click.option("--resume", is_flag=True, help="continue from OUT.ckpt (same options)"),
    ]):
        f = opt(f)
    return f


def device_option(default: str, more: str = ""):
    from hubcli.local.device import CHOICES_HELP

    return click.option("--device", default=default, show_default=True,
                        help=f"where the model runs: {CHOICES_HELP}{more}")


def training_data_options(f):
    """What `hub train` and `hub fuse` train on and where they write."""
    for opt in reversed([
        click.option("--task", type=click.Choice(TASK_CHOICES), default="classification",
                     show_default=True),
        click.option("--train", "train_path", required=True, type=click.Path(path_type=Path),
                     help="training data file"),
        click.option("--validation", type=click.Path(path_type=Path),
                     help="validation data file"),
        click.option("--out", required=True, type=click.Path(path_type=Path),
                     help="output folder"),
        click.option("--overwrite", is_flag=True,
                     help="replace an existing adapter folder at --out (once training "
                          "succeeded)"),
        column_options,
    ]):
        f = opt(f)
    return f


@click.command("train")
@training_data_options
@click.option("--base", help="base model folder or Hub id (default: packaged all-MiniLM-L6-v2)")
@click.option("--base-revision", help="Hub revision of the base")
@click.option("--method", type=click.Choice(["houlsby", "lora"]), default="houlsby",
              show_default=True, help="houlsby: bottleneck adapters; lora: low-rank updates of "
              "the attention query and value projections")
@click.option("--bottleneck", type=click.IntRange(min=1), default=64, show_default=True,
              help="houlsby: bottleneck size")
@click.option("--reads", type=click.Choice(HOULSBY_TAPS),
              help="houlsby: what the bottleneck f reads, with h a sublayer's output projection "
              "and x its input: output (h), sum (h + x), normed (LN(h + x): Pfeiffer et al.), "
              "input (x: a parallel adapter); the sublayer computes LN(skip + f(reads) + x) "
              "[default: output, tagging normed]")
@click.option("--skip", type=click.Choice(HOULSBY_TAPS), default="output", show_default=True,
              help="houlsby: what the adapter's skip connection adds back, in --reads' words")
@click.option("--layernorm", type=click.Choice(LAYERNORM_MODES), default="delta",
              show_default=True, help="houlsby: LayerNorms trained as deltas on the base's: "
              "delta, every one (Houlsby); own-layers, those of --layers only, so the layers "
              "below stay the base's (AdapterDrop: Parallel runs them once for all); frozen, none")
@click.option("--rank", type=click.IntRange(min=1), default=8, show_default=True,
              help="lora: rank r")
@click.option("--alpha", type=click.FloatRange(min=0, min_open=True), default=16.0,
              show_default=True, help="lora: updates are scaled by alpha / rank")
@click.option("--layers", help="layers that get adapters: all, 0-5, 0,2,4", default="all",
              show_default=True)
@click.option("--init-scale", type=float,
              help="houlsby: std of the adapters' initial weights [default: 1e-3, tagging 2e-2]")
@click.option("--lr", type=float, help="learning rate [default: 1e-3, full fine-tune 5e-5]")
@click.option("--epochs", type=click.IntRange(min=1),
              help="[default: 3, more on small data: enough for ~500 steps, at most 20]")
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True)
@loop_options
@click.option("--streaming", is_flag=True,
              help="read the training file (CSV, TSV, JSONL) as a stream: memory flat in its "
              "size; batches shuffled within a window, not grouped by length")
@click.option("--nproc", type=click.IntRange(min=1), default=1, show_default=True,
              help="data parallel processes (torchrun started for you; gloo on the CPU, NCCL "
              "on GPUs); the same steps as one process with the same --batch-size")
@click.option("--max-length", type=click.IntRange(min=8), default=128, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--pooling", type=click.Choice(["mean", "cls"]), default="mean", show_default=True)
@click.option("--full-finetune", is_flag=True, help="train every weight (the paper's baseline)")
@device_option("auto")
@click.option("--precision", type=click.Choice(precision.CHOICES), default="auto",
              show_default=True, help="bf16/fp16: matrix products in 16 bits under autocast, "
              "weights and loss in fp32; auto: on a CPU bf16 where it has AVX512-BF16 or AMX, "
              "on CUDA bf16 where the GPU has it, else fp16 with a gradient scaler")
@click.option("--stack", "stack", metavar="ADAPTER",
              help="train on top of this frozen adapter (folder or NS/NAME@VERSION), applied "
                   "before the new one at every site (MAD-X: a task adapter on a language "
                   "adapter); the new adapter's manifest requires it")
@click.option("--allow-unsigned", is_flag=True,
              help="with --stack: use an unsigned or untrusted adapter to stack on")
@output_options
def train_cmd(train_path, fmt, text_column, text_pair_column, label_column, layers, nproc,
              as_json, stack, **opts) -> None:
    """Train an adapter (Houlsby, or LoRA with --method lora) on a frozen base model."""
    from hubcli.local.train import TrainSettings

    _refuse_the_other_methods_options(opts["method"], opts)
    s = TrainSettings(train=train_path, fmt=fmt, layers=parse_layers(layers),
                      columns=columns(text_column, text_pair_column, label_column),
                      **({"compose": "stack", "components": (stack,)} if stack else {}), **opts)
    _train_and_report(s, as_json, nproc)


# the options only one method reads: given with the other, they would be ignored
METHOD_OPTIONS = {"houlsby": ("bottleneck", "reads", "skip", "layernorm", "init_scale"),
                  "lora": ("rank", "alpha")}


def _refuse_the_other_methods_options(method: str, opts: dict) -> None:
    """Raises OptionError: an option of the other method given (on the command line or from
    the environment), which this one would silently ignore; under --full-finetune, any
    method's."""
    ctx = click.get_current_context()
    for other, names in METHOD_OPTIONS.items():
        for name in names if other != method or opts["full_finetune"] else ():
            if ctx.get_parameter_source(name) in (click.core.ParameterSource.COMMANDLINE,
                                                  click.core.ParameterSource.ENVIRONMENT):
                flag = "--" + name.replace("_", "-")
                if opts["full_finetune"]:
                    raise OptionError(flag, opts[name], "is for adapters, and "
                                      "--full-finetune trains every weight instead",
                                      hint=f"leave {flag} out, or --full-finetune")
                raise OptionError(flag, opts[name], f"is for --method {other}, and this "
                                  f"trains --method {method}",
                                  hint=f"add --method {other}, or leave {flag} out")


@click.command("fuse")
@click.option("--adapters", required=True, metavar="A,B,...",
              help="the frozen adapters to fuse, comma-separated: folders or NS/NAME@VERSION")
@training_data_options
@click.option("--base", help="base model folder or Hub id (default: the adapters' own base)")
@click.option("--lr", type=float, help="learning rate [default: 5e-5, Pfeiffer et al. 2021]")
@click.option("--epochs", type=click.IntRange(min=1), help="[default: 10, Pfeiffer et al. 2021]")
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True)
@loop_options
@click.option("--max-length", type=click.IntRange(min=8), default=128, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--pooling", type=click.Choice(["mean", "cls"]), default="mean", show_default=True)
@device_option("auto")
@click.option("--precision", type=click.Choice(precision.CHOICES), default="auto",
              show_default=True, help="as for hub train")
@click.option("--allow-unsigned", is_flag=True,
              help="fuse unsigned or untrusted adapters (with a warning)")
@output_options
def fuse_cmd(adapters, train_path, fmt, text_column, text_pair_column, label_column, as_json,
             **opts) -> None:
    """Train an AdapterFusion over frozen adapters: only the fusion layers, LayerNorm deltas
    and a head (starting from the head of the one component that predicts the same labels)."""
    from hubcli.local.train import TrainSettings

    refs = tuple(a.strip() for a in adapters.split(",") if a.strip())
    s = TrainSettings(train=train_path, fmt=fmt, compose="fuse", components=refs,
                      columns=columns(text_column, text_pair_column, label_column), **opts)
    _train_and_report(s, as_json)


def _train_and_report(s, as_json: bool, nproc: int = 1) -> None:
    from hubcli.local.distributed import from_environment
    from hubcli.local.train import train

    if nproc > 1:
        from hubcli.local.launch import launch

        result = launch(s, nproc)
    else:
        result = train(s, log=notice if not s.quiet else (lambda _m: None))
    if not from_environment().is_main:
        return  # a rank other than 0 of a distributed run: rank 0 reports
    if as_json:
        echo_json({"out": str(result.out), "best_epoch": result.best_epoch,
                   "history": result.history, "parameters": result.parameters,
                   "train_examples_per_s": round(result.examples_per_second, 2)})
        return
    p = result.parameters
    click.echo(f"trainable parameters: {p['trainable']:,} "
               f"({100 * p['trainable'] / p['base']:.2f}% of the base's {p['base']:,})")
    if result.best:
        at = f"step {result.best['step']}" if "step" in result.best else f"epoch {result.best_epoch}"
        click.echo(f"best {at}: " + ", ".join(f"{k}={v:.4f}" for k, v in result.best.items()
                               if k not in ("epoch", "step")))
    click.echo(f"wrote {result.out}")


@click.command("eval")
@click.argument("adapter", type=click.Path(path_type=Path))
@click.option("--data", required=True, type=click.Path(path_type=Path), help="labelled data file")
@column_options
@attach_options
@device_option("cpu")
@click.option("--json", "as_json", is_flag=True, help="print metrics as JSON")
def eval_cmd(adapter, data, fmt, text_column, text_pair_column, label_column, as_json,
             **attach) -> None:
    """Score an adapter on labelled data."""
    from hubcli.local.inference import load_predictor, read_labelled

    examples = read_labelled(adapter, data, fmt=fmt,
                             columns=columns(text_column, text_pair_column, label_column))
    predictor = load_predictor(adapter, notify=notice, **attach)
    metrics = predictor.evaluate(examples)
    if as_json:
        echo_json({"adapter": str(adapter), "data": str(data), "examples": len(examples),
                   "metrics": metrics})
    else:
        table(["metric", "value"], sorted(metrics.items()))
        click.echo(f"({len(examples)} examples)")


@click.command("predict")
@click.argument("args", nargs=-1)
@click.option("--adapter", "-a", "adapters", multiple=True,
              help="adapter folder or NS/NAME[@VERSION]; repeat it to run every text through "
                   "several adapters in one pass (then every argument is a text)")
@click.option("--pair", help="second text of a sentence-pair adapter, for every TEXT "
              "(on stdin: TEXT<TAB>PAIR per line)")
@click.option("--context", help="question answering: the context every TEXT (a question) is "
              "asked about (on stdin: QUESTION<TAB>CONTEXT per line)")
@attach_options
@click.option("--runtime", type=click.Choice(["torch", "onnx"]), default="torch",
              show_default=True, help="onnx: run the adapter's ONNX export under onnxruntime "
              "(exported once and cached; needs the [onnx] extra)")
@device_option("cpu", "; the torch runtime")
@click.option("--json", "as_json", is_flag=True,
              help="one JSON object per text (blank lines on stdin are skipped)")
def predict_cmd(args, adapters, pair, context, runtime, device, as_json, **attach) -> None:
    """Predict with an adapter: hub predict [ADAPTER] [TEXT...] (texts also from stdin).

    ADAPTER is a local folder or NS/NAME[@VERSION]; without it, the last adapter pulled. A
    graph `hub export --format onnx` wrote (FILE.onnx) runs under onnxruntime.
    """
    from hubcli.cli.inputs import checked_texts, stdin_texts
    from hubcli.local.inference import load_predictor
    from hubcli.remote.refs import resolve_adapter, split_adapter_and_texts

    graph = _exported_graph(args) if not adapters else None
    if adapters:
        _check_adapters_and_texts(adapters, args)  # before any is pulled
        folders, texts = [resolve_adapter(a, notify=notice) for a in adapters], list(args)
    elif graph is not None:
        if runtime == "torch" and click.get_current_context().get_parameter_source(
                "runtime") is not click.core.ParameterSource.DEFAULT:
            raise UsageError(f"--runtime torch: {args[0]} is an exported graph, which runs "
                             "under onnxruntime", hint="drop --runtime, or give the adapter's "
                                                       "folder to run it with torch")
        texts, runtime = list(args[1:]), "onnx"
    else:
        adapter, texts = split_adapter_and_texts(list(args), notify=notice)
    texts = checked_texts(texts)
    if not texts and not sys.stdin.isatty():
        texts = stdin_texts(sys.stdin.buffer)
    if not texts:
        raise UsageError("no input texts", hint='pass texts as arguments or one per line on stdin')
    second = _second_text(pair, context)
    if device not in ("cpu", "auto") and runtime == "onnx":
        raise UsageError(f"--device {device} applies to the torch runtime",
                         hint="drop --device, or " + ("give the adapter's folder to run it "
                                                      "with torch" if graph else
                                                      "use --runtime torch"))
    if adapters:
        if runtime == "onnx":
            raise UsageError("--runtime onnx runs one adapter", hint="drop --adapter/-a")
        if second:
            raise UsageError(f"--{second[0]} does not apply with --adapter",
                             hint="give TEXT<TAB>SECOND lines instead")
        return _predict_each(folders, texts, device, as_json, attach)
    if graph is not None:
        from hubcli.interop.onnx_runtime import load_onnx

        notice(f"notice: {graph} is an exported graph (base, adapter and head): graphs carry "
               "no signature, so run only those you made or trust")
        predictor = load_onnx(graph, base=attach["base"])
    elif runtime == "onnx":
        from hubcli.api import load_onnx_predictor

        predictor = load_onnx_predictor(adapter, notify=notice, **attach)
    else:
        predictor = load_predictor(adapter, notify=notice, device=device, **attach)
    _check_second(predictor.task, second)
    preds = predictor.predict([predictor.task.parse_input(t, second and second[1])
                               for t in texts])
    if as_json:
        for text, pred in zip(texts, preds):
            echo_json({"text": echo_text(text), **pred})
    else:
        table(["text", "prediction"], [(t, predictor.task.describe(p)) for t, p in zip(texts, preds)])


def _exported_graph(args: tuple[str, ...]) -> Path | None:
    """The first argument as an ONNX graph file (FILE.onnx, there), else None."""
    if args and args[0].lower().endswith(".onnx") and expanded(args[0]).is_file():
        return expanded(args[0])
    return None


def _check_adapters_and_texts(adapters: tuple[str, ...], texts: tuple[str, ...]) -> None:
    """With --adapter/-a every argument is a text: refuse an adapter folder among them, and an
    adapter given twice.

    Raises:
        UsageError: either.
    """
    given = {expanded(a).resolve() for a in adapters}
    for text in texts:
        if is_dir(text) and (expanded(text) / "manifest.json").is_file():
            hint = (f"it is given as -a already: leave {text} out of the texts"
                    if expanded(text).resolve() in given else f"give it as -a {text} too")
            raise UsageError(f"{text} is an adapter folder, and with --adapter/-a every "
                             "argument is a text", hint=hint)
    for k, ref in enumerate(adapters):
        if ref in adapters[:k]:
            raise UsageError(f"{ref} is given twice", hint="give each adapter once")


def _second_text(pair: str | None, context: str | None) -> tuple[str, str] | None:
    """("pair" or "context", the text), from whichever of the two flags was given."""
    if pair is not None and context is not None:
        raise UsageError("--pair and --context do not go together",
                         hint="--pair for sentence-pair adapters, --context for QA adapters")
    return ("pair", pair) if pair is not None else ("context", context) if context else None


def _check_second(task, second: tuple[str, str] | None) -> None:
    """Refuse a second text the adapter's task does not take, naming the flag it does take."""
    if second and second[0] != task.second_input:
        takes = f"use --{task.second_input}" if task.second_input else "it takes one text"
        raise UsageError(f"--{second[0]} does not apply to a {task.name} adapter",
                         hint=takes)


def _predict_each(folders, texts: list[str], device: str, as_json: bool, attach: dict) -> None:
    from hubcli.api import predict_each
    from hubcli.tasks import get_task

    hub, names, preds = predict_each(folders, texts, device=device, notify=notice_once(),
                                     **attach)
    if as_json:
        for text, row in zip(texts, preds):
            for name in names:
                echo_json({"text": echo_text(text), "adapter": name, **row[name]})
        return
    tasks = {n: get_task(hub.manifests[n]["task"]) for n in names}
    table(["text", "adapter", "prediction"],
          [(t, n, tasks[n].describe(row[n])) for t, row in zip(texts, preds) for n in names])
