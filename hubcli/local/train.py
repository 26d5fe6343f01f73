"""`hub train`: the paper's recipe as defaults.

AdamW, linear warmup over the first 10% of steps then linear decay to 0, batch 32, evaluation
after every epoch, and the best epoch's weights kept. Only the adapter's tensors (bottlenecks,
LayerNorm deltas, head) get gradients; with `full_finetune` every weight does (the baseline).
With `compose` ("fuse": `hub fuse`, "stack": `hub train --stack`), frozen components are
attached first and only the fusion or the stacked adapter trains (see `fuse.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from hubcli.local import device, distributed, precision
from hubcli.errors import DataError, UsageError
from hubcli.format.vocab import DEFAULT_MAX_LENGTH
from hubcli.fsutil import sha256_file
from hubcli.local.fuse import FUSE, FUSION_EPOCHS
from hubcli.local.options import check_settings
from hubcli.tasks import get_task
from hubcli.tasks.base import Columns


@dataclass
class TrainSettings:
    """Everything `hub train` needs; the CLI fills this from its options."""

    train: Path
    out: Path
    task: str = "classification"
    validation: Path | None = None
    fmt: str | None = None
    columns: Columns = field(default_factory=Columns)
    base: str | None = None
    base_revision: str | None = None
    method: str = "houlsby"  # or "lora" (hubcli/core/config.py)
    bottleneck: int = 64
    reads: str | None = None  # houlsby only: its form (hubcli/core/config.py); None: the task's
    skip: str = "output"
    layernorm: str = "delta"  # houlsby only: which LayerNorms get deltas (hubcli/core/config.py)
    layers: tuple[int, ...] | None = None
    init_scale: float | None = None  # None: the task's (Task.adapter_init_scale)
    rank: int = 8  # lora only
    alpha: float = 16.0  # lora only
    lr: float | None = None
    epochs: int | None = None  # None: auto_epochs()
    batch_size: int = 32
    max_length: int = DEFAULT_MAX_LENGTH
    seed: int = 0
    warmup_ratio: float = 0.1
    pooling: str = "mean"
    full_finetune: bool = False
    precision: str = "auto"  # see hubcli/local/precision.py
    device: str = "auto"  # see hubcli/local/device.py
    # steps, evaluation and checkpoints: hubcli/local/loop.py and checkpoint.py
    grad_accum: int = 1  # batches per optimiser step
    max_steps: int | None = None  # instead of epochs
    eval_every: int | None = None  # steps; None: after every epoch
    patience: int | None = None  # evaluations without a better score before stopping
    checkpoint_every: int | None = None  # steps
    resume: bool = False
    log_every: int = 10  # steps between --log-json lines
    log_json: Path | None = None
    streaming: bool = False  # read the training file as a stream (hubcli/local/streaming.py)
    name: str | None = None
    version: str = "0.1.0"
    description: str | None = None
    quiet: bool = False
    overwrite: bool = False  # replace an existing trained folder at `out`
    compose: str | None = None  # "fuse" or "stack" (hubcli/local/fuse.py)
    components: tuple[str, ...] = ()  # folders or NS/NAME@VERSION, frozen
    allow_unsigned: bool = False  # components unsigned or signed by an untrusted key

    @property
    def learning_rate(self) -> float:
        if self.lr is not None:
            return self.lr
        return 5e-5 if self.full_finetune or self.compose == FUSE else 1e-3

    @property
    def form(self) -> tuple[str, str]:
        """A Houlsby adapter's (reads, skip): --reads as given, else the task's."""
        return self.reads or get_task(self.task).adapter_reads, self.skip


@dataclass
class TrainResult:
    out: Path
    history: list[dict[str, float]]
    best_epoch: int | None
    best: dict[str, float] | None  # the history row whose weights were kept
    parameters: dict[str, int]
    examples_per_second: float
    manifest: dict[str, Any] | None


def data_digest(path: Path, examples: int, fmt: str | None) -> dict[str, Any]:
    out = {"name": Path(path).name, "sha256": sha256_file(Path(path)), "examples": examples}
    if fmt:
        out["format"] = fmt
    return out


MIN_STEPS, MIN_EPOCHS, MAX_EPOCHS = 500, 3, 20


def auto_epochs(n_features: int, batch_size: int) -> int:
    """3 epochs (the paper's smallest setting) on large data; on small data, enough epochs for
    about 500 optimiser steps, at most 20: adapters start near the identity and a few dozen
    steps leave them there (150 NER sentences: F1 0.03 after 3 epochs, 0.91 after 20)."""
    steps_per_epoch = math.ceil(n_features / batch_size)
    return max(MIN_EPOCHS, min(MAX_EPOCHS, math.ceil(MIN_STEPS / steps_per_epoch)))


def _placed(s: TrainSettings, group: distributed.Group) -> TrainSettings:
    """`s` with its device (this rank's GPU in a distributed run) and precision resolved.

    Raises:
        OptionError / UsageError: a device this machine lacks, or a precision it cannot run.
    """
    where = device.resolve(s.device, local_rank=group.local_rank)
    return replace(s, device=where, precision=precision.resolve(s.precision, device.kind(where)))


def train(s: TrainSettings, log: Callable[[str], None] = print) -> TrainResult:
    """Train an adapter (or a full fine-tune) and write it to `s.out`; in a distributed run
    (torchrun's environment, see local/distributed.py) as one rank, rank 0 writing.

    Raises:
        DataError: unreadable or inconsistent data (file and line named), or a single class
            for classification.
        UsageError / OptionError: inconsistent settings, or an --out folder that exists
            (without `overwrite`) or cannot be written; all raised before the base loads.
        ModelError / UnsupportedModelError: the base model cannot be used.
        TrainingStopped: SIGINT/SIGTERM stopped the run; a checkpoint was written.
    """
    if (s.epochs is not None and s.epochs < 1) or s.batch_size < 1 or s.max_length < 8:
        raise UsageError("--epochs and --batch-size must be >= 1 and --max-length >= 8")
    check_settings(s)  # before the base loads or any data is read
    group = distributed.from_environment()
    s = _placed(s, group)
    if not group.is_main:  # rank 0 speaks for the run
        log, s = (lambda _m: None), replace(s, quiet=True)
    components = _components(s, log)
    if components:
        from hubcli.local.attach import base_for

        manifest = components[0].bundle.manifest
        theirs = manifest["base_model"]
        s = replace(s, base=base_for(manifest, s.base),
                    base_revision=s.base_revision or (None if s.base else theirs.get("revision")))
    task = get_task(s.task)
    task.notify = log
    if s.streaming:
        from hubcli.local.streaming import TrainStream

        train_ex = TrainStream(task, Path(s.train), s.fmt, s.columns)
        labels, n_train = train_ex.labels, train_ex.examples
    else:
        train_ex = task.read(Path(s.train), fmt=s.fmt, columns=s.columns)
        labels, n_train = task.label_names(train_ex), len(train_ex)
    val_ex = task.read(Path(s.validation), fmt=s.fmt, columns=s.columns) if s.validation else []
    if not n_train:
        raise DataError("no training examples", path=str(s.train))
    task.check_training_labels(labels, Path(s.train))
    # torch only now: every check above answers in a fraction of a second without it
    distributed.start(group, s.device)
    try:
        return _train(s, task, train_ex, val_ex, labels, group, log, components)
    finally:
        distributed.stop(group)


def _text_pairs(task, train_ex) -> bool | None:
    """Whether a sentence task's training examples were pairs (a file has a pair column or
    none), for `hub predict` to refuse the wrong number of texts; None for other tasks. A
    stream (`TrainStream`) is asked for its first example again."""
    if task.second_input != "pair":
        return None
    first = next(iter(train_ex.read() if hasattr(train_ex, "read") else train_ex), None)
    return first is not None and first.pair is not None


def _train(s: TrainSettings, task, train_ex, val_ex: list, labels: list[str],
           group: distributed.Group, log: Callable[[str], None], components: list
           ) -> TrainResult:
    """Train on `train_ex` (a list of examples, or a streaming.TrainStream), over the frozen
    `components` of a fusion or stack if any."""
    import torch

    from hubcli.base.load import load_base
    from hubcli.local import checkpoint
    from hubcli.local.batching import EpochBatches
    from hubcli.local.loop import Trainer

    torch.manual_seed(s.seed)
    base = load_base(s.base, revision=s.base_revision)
    if s.streaming:
        from hubcli.local.streaming import StreamBatches

        source = StreamBatches(train_ex, base.tokenizer, labels, s.max_length, s.batch_size,
                               s.seed, group)
    else:
        train_feats = task.encode(train_ex, base.tokenizer, labels, s.max_length)
        task.fit_loss(train_feats, s.batch_size)
        source = EpochBatches(train_feats, s.batch_size, s.seed, by_length=task.bucket_by_length)
    if s.epochs is None and s.max_steps is None:
        s = replace(s, epochs=FUSION_EPOCHS if s.compose == FUSE else
                    auto_epochs(source.examples, s.batch_size * s.grad_accum))
    run = _Run(s, task, labels, base, log, components)
    val_feats = task.encode(val_ex, base.tokenizer, labels, s.max_length) if val_ex else []
    trainer = Trainer(run, source, group, log)
    if s.resume:
        trainer.resume()
    history, best_row, speed = trainer.fit(val_feats, val_ex)
    best = history[best_row - 1] if best_row else None
    manifest = None
    if group.is_main:
        digests = {"train_data": data_digest(s.train, source.examples, s.fmt)}
        if s.validation:
            digests["validation_data"] = data_digest(s.validation, len(val_ex), s.fmt)
        manifest = run.save(history, best, trainer.p.step, digests, processes=group.world,
                            text_pairs=_text_pairs(task, train_ex))
        checkpoint.path_for(s.out).unlink(missing_ok=True)  # the run is complete
    return TrainResult(Path(s.out), history, best and best["epoch"], best,
                       run.parameter_counts(), speed, manifest)


def head_dropout(config) -> float:
    """The head's dropout as BERT's own heads take it: the config's `classifier_dropout`, else
    its `hidden_dropout_prob` (0.1 for MiniLM and BERT; a base without dropout gets a
    deterministic head too, which data parallel equality tests need)."""
    value = getattr(config, "classifier_dropout", None)
    return float(value if value is not None else getattr(config, "hidden_dropout_prob", 0.1))


def _components(s: TrainSettings, log: Callable[[str], None]) -> list:
    """The frozen components of a fusion or stack, verified, before the base loads.

    Raises:
        OptionError: see `fuse.check_components`; components with --full-finetune.
        ComponentError, BaseMismatchError, SignatureError, ...: see `fuse.load_components`.
    """
    if s.compose is None:
        return []
    from hubcli.errors import OptionError
    from hubcli.local.fuse import check_components, load_components

    if s.full_finetune:
        raise OptionError("--full-finetune", True, "trains every weight; a fusion or stack "
                          "keeps its components frozen", hint="drop --full-finetune")
    check_components(s.components, s.compose)
    return load_components(s.components, Path(s.out), allow_unsigned=s.allow_unsigned,
                           notify=log)


class _Run:
    """One training run: the model, its trainable parameters, and saving (the loop:
    loop.Trainer)."""

    def __init__(self, s: TrainSettings, task, labels: list[str], base, log,
                 components: list | None = None):
        from hubcli.core.config import HoulsbyConfig, LoraConfig
        from hubcli.core.heads import HeadConfig
        from hubcli.core.model import AdapterModel, FullFinetuneModel

        self.s, self.task, self.labels, self.base, self.log = s, task, labels, base, log
        self.name = s.name or Path(s.out).name
        self.own = self.name  # the name its tensors are under (a fusion's: Fuse(a, b, ...))
        self.components, self.fusion_arch = components or [], None
        self.head = HeadConfig(task.head_type, task.num_outputs(labels), tuple(labels),
                               pooling=s.pooling, dropout=head_dropout(base.encoder.config),
                               label_scheme=task.label_scheme)
        if s.full_finetune:
            self.model = FullFinetuneModel(base.encoder, self.head)
            self.params = [p for p in self.model.parameters() if p.requires_grad]
        else:
            reads, skip = s.form
            self.config = (LoraConfig(rank=s.rank, alpha=s.alpha, layers=s.layers)
                           if s.method == "lora" else
                           HoulsbyConfig(bottleneck=s.bottleneck, layers=s.layers,
                                         init_scale=task.adapter_init_scale
                                         if s.init_scale is None else s.init_scale,
                                         reads=reads, skip=skip, layernorm=s.layernorm))
            self.model = AdapterModel(base.encoder)
            if self.components:
                from hubcli.local.fuse import build

                self.own, self.fusion_arch = build(self.model, base.info, self.components,
                                                   s.compose, self.name, self.head,
                                                   self.config, log)
            else:
                self.model.add_adapter(self.name, self.config, self.head)
                self.model.activate(self.name)
            self.params = self.model.trainable_parameters(self.own)
            # components stay frozen: no gradient is even computed for them
            own = {id(p) for p in self.params}
            for p in self.model.parameters():
                p.requires_grad_(id(p) in own)

    def parameter_counts(self) -> dict[str, int]:
        if self.s.full_finetune:
            n = sum(p.numel() for p in self.params)
            return {"trainable": n, "base": self.base.info.num_parameters}
        return self.model.parameter_counts(self.own)

    def snapshot(self) -> dict:
        if self.s.full_finetune:
            return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        return self.model.adapter_state_dict(self.own)

    def restore(self, state: dict) -> None:
        if self.s.full_finetune:
            self.model.load_state_dict(state)
        else:
            self.model.load_adapter_state(self.own, state)

    def save(self, history, best, steps: int, digests, *, processes: int = 1,
             text_pairs: bool | None = None) -> dict | None:
        from hubcli.local.adapterdir import (framework_versions, now_iso, safe_name,
                                             write_adapter_dir)
        from hubcli.local.finetune_dir import write_finetune_dir

        s, counts = self.s, self.parameter_counts()
        training = {"epochs": history[-1]["epoch"], "best_epoch": best and best["epoch"],
                    "steps": steps, **({"best_step": best["step"]} if best and "step" in best
                                       else {}),
                    "grad_accum": s.grad_accum, "processes": processes,
                    "learning_rate": s.learning_rate,
                    "batch_size": s.batch_size, "max_length": s.max_length, "seed": s.seed,
                    "warmup_ratio": s.warmup_ratio, "precision": s.precision,
                    "device": device.kind(s.device), "optimizer": "AdamW",
                    "schedule": "linear warmup then linear decay", **digests,
                    **({} if text_pairs is None else {"text_pairs": text_pairs})}
        metrics = {"primary": self.task.primary_metric, "validation": history}
        if best is not None:
            metrics["best"] = {k: v for k, v in best.items() if k not in ("epoch", "step")}
        if s.full_finetune:
            write_finetune_dir(Path(s.out), self.model, self.base, self.task.name, training,
                               metrics)
            return None
        manifest = {
            "schema_version": 1, "name": safe_name(self.name), "version": s.version,
            **({"description": s.description} if s.description else {}),
            "task": self.task.name, "head": self.head.to_manifest(),
            "base_model": self.base.info.to_manifest(),
            "architecture": self.fusion_arch or self.config.to_manifest(self.model.num_layers),
            **({"requires": [c.requirement for c in self.components]} if self.components
               else {}),
            "parameters": {**counts, "share": round(counts["trainable"] / counts["base"], 6)},
            "training": training, "metrics": metrics, "files": [], "created": now_iso(),
            "framework": framework_versions(),
        }
        manifest = write_adapter_dir(Path(s.out), manifest, self.model.adapter_state_dict(self.own))
        from hubcli.signing.policy import record_trained

        record_trained(Path(s.out))  # so predicting with your own fresh adapter needs no signature
        return manifest

