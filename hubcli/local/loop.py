"""The training loop: optimiser steps over micro-batches, evaluation keeping the best weights,
early stopping, checkpoints, and progress (one bar, `--log-json` lines), for one process or
one rank of a data parallel run (`distributed.Group`).

A step is `grad_accum` batches of `batch_size` (its global batch); a run is `max_steps` steps,
else `epochs` epochs. Steps never cross an epoch's end, so evaluating after every epoch (the
default) and the batch order stay what they were. Each batch's loss is weighted by its share of
the step's examples, so a step's gradient is the mean over its global batch whether it came in
one batch, several (accumulated) or several ranks' shards (summed by the all-reduce).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Callable

from hubcli.local import checkpoint, device, precision
from hubcli.local.distributed import Group
from hubcli.local.fuse import FUSE


@dataclass
class Progress:
    """Where the loop is and what it has seen: all a checkpoint needs besides tensors' states."""

    step: int = 0  # optimiser steps done
    epoch: int = 1  # the epoch being trained (1-based)
    batch: int = 0  # its batches consumed
    history: list[dict[str, float]] = field(default_factory=list)
    best: float = -math.inf
    best_row: int | None = None  # 1-based row of `history`
    best_state: dict | None = None
    since_best: int = 0  # evaluations without a better score (--patience)
    evaluated_at: int = -1
    window_loss: float = 0.0  # summed loss x examples since the last evaluation
    window_examples: int = 0
    seen: int = 0
    busy: float = 0.0  # seconds spent in training steps (not evaluating)


def total_steps(s, batches_per_epoch: int) -> int:
    return s.max_steps or math.ceil(batches_per_epoch / s.grad_accum) * s.epochs


def linear_warmup_decay(total_steps: int, warmup_ratio: float) -> Callable[[int], float]:
    """The learning rate factor at each step: linear warmup over `warmup_ratio` of the steps,
    then linear decay to 0 at `total_steps`."""
    warm = max(1, int(warmup_ratio * total_steps))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (total_steps - step) / max(1, total_steps - warm))

    return factor


def fingerprint(s, source, steps: int) -> dict[str, Any]:
    """What decides every step: a checkpoint resumes only a run with the same of each. (Not the
    number of processes: the global batch, and so every step, is the same for any.)"""
    names = ("task", "base", "method", "bottleneck", "layers", "init_scale", "rank", "alpha",
             "batch_size", "grad_accum", "max_length", "seed", "warmup_ratio", "pooling",
             "full_finetune", "precision", "streaming")
    out = {name: _plain(getattr(s, name)) for name in names}
    if out["init_scale"] is None:  # the task's default: a resume replaces the initial weights
        del out["init_scale"]  # anyway, and checkpoints that recorded an older default resume
    # a bottleneck's form only where the run trains one and it is not Houlsby's: checkpoints
    # from before forms (and before tagging's own) resume
    if s.method == "houlsby" and not s.full_finetune and s.compose != FUSE:
        out.update({name: tap for name, tap in zip(("reads", "skip"), s.form) if tap != "output"})
        if s.layernorm != "delta":  # likewise: checkpoints from before --layernorm resume
            out["layernorm"] = s.layernorm
    train = Path(s.train)
    out.update(learning_rate=s.learning_rate, steps=steps, examples=source.examples,
               train_data=f"{train.name}, {train.stat().st_size} bytes")
    return out


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


class Trainer:
    """One run's optimiser, scheduler, scaler and loop over `source` (batching.EpochBatches or a
    stream)."""

    def __init__(self, run, source, group: Group, log: Callable[[str], None]):
        import torch

        self.run, self.s, self.source, self.group, self.log = run, run.s, source, group, log
        self.kind = device.kind(self.s.device)
        run.model.to(self.s.device)
        # fused: one kernel for all parameters instead of a loop over ~100 small tensors
        self.opt = torch.optim.AdamW(run.params, lr=self.s.learning_rate,
                                     fused=self.kind in ("cpu", "cuda"))
        self.total = total_steps(self.s, source.batches_per_epoch())
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, linear_warmup_decay(self.total, self.s.warmup_ratio))
        self.scaler = precision.grad_scaler(self.s.precision, self.kind)
        self.ckpt = checkpoint.path_for(self.s.out)
        self.p = Progress()

    def resume(self) -> None:
        """Continue from the checkpoint of an earlier run with the same settings.

        Raises:
            OptionError: see checkpoint.load.
        """
        state = checkpoint.load(self.ckpt, fingerprint(self.s, self.source, self.total))
        self.run.restore(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.p = Progress(**state["progress"])
        checkpoint.restore_rng(state["rng"])
        if self.group.is_main:
            self.log(f"resumed from {self.ckpt} at step {self.p.step} of {self.total}")

    def save_checkpoint(self) -> None:
        if self.group.is_main:
            checkpoint.save(self.ckpt, {
                "fingerprint": fingerprint(self.s, self.source, self.total),
                "model": self.run.snapshot(), "optimizer": self.opt.state_dict(),
                "scheduler": self.sched.state_dict(), "scaler": self.scaler.state_dict(),
                "progress": vars(self.p), "rng": checkpoint.rng_states()})

    def fit(self, val_feats: list[dict], val_ex: list) -> tuple[list[dict], int | None, float]:
        """Train to the end (or early stop); the best evaluated weights end up in the model.
        Returns (history, best row (1-based) or None without validation, examples/s).

        Raises:
            checkpoint.TrainingStopped: SIGINT/SIGTERM arrived; a checkpoint was written.
        """
        s, p = self.s, self.p
        bar = _bar(self.total, p.step, quiet=s.quiet or not self.group.is_main)
        logger = JsonLog(s.log_json if self.group.is_main else None)
        self.run.model.train()
        with checkpoint.stop_requests() as signals, logger:
            batches = iter(self.source.epoch(p.epoch))
            batches = islice(batches, p.batch, None)
            per_epoch = self.source.batches_per_epoch()
            while p.step < self.total:
                step_batches = list(islice(batches, min(s.grad_accum, per_epoch - p.batch)))
                t0 = time.perf_counter()
                loss, examples, halted = self.step(step_batches, bool(signals))
                p.busy += time.perf_counter() - t0
                p.step, p.batch, p.seen = p.step + 1, p.batch + len(step_batches), p.seen + examples
                p.window_loss, p.window_examples = (p.window_loss + loss,
                                                    p.window_examples + examples)
                bar.update(1)
                bar.set_postfix(epoch=p.epoch, loss=f"{loss / examples:.4f}",
                                ex_s=f"{p.seen / p.busy:.0f}", refresh=False)
                if s.log_every and p.step % s.log_every == 0:
                    logger.write(step=p.step, epoch=p.epoch, loss=round(loss / examples, 6),
                                 lr=self.sched.get_last_lr()[0],
                                 examples_per_s=round(p.seen / p.busy, 2),
                                 eta_s=round((self.total - p.step) * p.busy / p.step, 1))
                end_of_epoch = p.batch >= per_epoch
                early = ((s.eval_every and p.step % s.eval_every == 0)
                         or (not s.eval_every and end_of_epoch)) and self.evaluate(
                    val_feats, val_ex, logger)
                if end_of_epoch:
                    p.epoch, p.batch = p.epoch + 1, 0
                    batches = iter(self.source.epoch(p.epoch))
                if halted or (s.checkpoint_every and p.step % s.checkpoint_every == 0):
                    self.save_checkpoint()
                if halted:
                    bar.close()
                    raise checkpoint.TrainingStopped(
                        _signal_name(signals[0]) if signals else "a signal to another rank",
                        p.step, self.total, self.ckpt)
                if early:
                    break
            if p.evaluated_at != p.step:
                self.evaluate(val_feats, val_ex, logger)
        bar.close()
        if p.best_state is not None and p.best_row != len(p.history):
            self.run.restore(p.best_state)
        self.run.model.eval().to("cpu")  # the weights are written from the CPU
        return p.history, (p.best_row if val_feats else None), p.seen / max(p.busy, 1e-9)

    def step(self, step_batches: list[list[dict]], stop: bool) -> tuple[float, int, bool]:
        """One optimiser step on the global batch `step_batches`: (summed loss x examples over
        all ranks, examples, whether any rank was asked to stop: `stop` here)."""
        import torch

        from hubcli.local.inference import to_device

        run, task = self.run, self.run.task
        examples = sum(len(b) for b in step_batches)
        loss_sum = torch.zeros((), device=self.s.device)
        for batch in step_batches:
            mine = self.group.shard(batch)
            if not mine:
                continue
            inputs = to_device(task.collate(mine), self.s.device)
            with precision.autocast(self.s.precision, self.kind):
                loss = task.loss(run.model(inputs["input_ids"], inputs["attention_mask"],
                                           inputs.get("token_type_ids")), inputs)
            # a mean over this rank's rows counts for them; a sum (over the whole batch's
            # normaliser) is this rank's part of the batch's loss already: the ranks' add up
            rows = len(batch) if task.loss_sums else len(mine)
            self.scaler.scale(loss * (rows / examples)).backward()
            loss_sum += loss.detach().float() * rows
        loss_sum, stop = self._sync(loss_sum, stop)
        self.scaler.step(self.opt)
        self.scaler.update()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        return loss_sum, examples, stop

    def _sync(self, loss_sum, stop: bool) -> tuple[float, bool]:
        """Sum the trainable gradients, the loss and the stop requests over the ranks: one
        all-reduce of one flat tensor."""
        import torch

        if self.group.world == 1:
            return loss_sum.item(), stop
        params = self.run.params
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1).float() for g in grads]
                         + [loss_sum.reshape(1), torch.tensor([float(stop)], device=loss_sum.device)])
        self.group.sum(flat)
        offset = 0
        for param in params:
            n = param.numel()
            param.grad = flat[offset:offset + n].view_as(param).to(param.dtype)
            offset += n
        return flat[-2].item(), flat[-1].item() > 0

    def evaluate(self, val_feats: list[dict], val_ex: list, logger: JsonLog) -> bool:
        """Score the model (rank 0), keep the best weights, and say whether patience ran out
        (agreed by all ranks)."""
        import torch

        from hubcli.local.inference import run_model

        s, p, task = self.s, self.p, self.run.task
        row: dict[str, float] = {"epoch": p.epoch - (p.batch == 0 and p.step > 0)}
        if s.eval_every:
            row["step"] = p.step
        row["train_loss"] = round(p.window_loss / max(p.window_examples, 1), 6)
        p.window_loss, p.window_examples, p.evaluated_at = 0.0, 0, p.step
        out_of_patience = False
        if self.group.is_main:
            if val_feats:
                self.run.model.eval()
                preds = run_model(self.run.model, task, val_feats, val_ex, self.run.labels)
                self.run.model.train()
                row.update({k: round(v, 6) for k, v in
                            task.metrics(preds, val_ex, self.run.labels).items()})
            p.history.append(row)
            self.log(_describe(row))
            logger.write(**row)
            score = row.get(task.primary_metric, -row["train_loss"])
            if score > p.best:
                p.best, p.best_row, p.best_state, p.since_best = (
                    score, len(p.history), self.run.snapshot(), 0)
            else:
                p.since_best += 1
            out_of_patience = bool(val_feats and s.patience and p.since_best >= s.patience)
            if out_of_patience:
                self.log(f"early stop: no better {task.primary_metric} in {s.patience} "
                         f"evaluations (best: row {p.best_row})")
        if self.group.world > 1:
            flag = torch.tensor([float(out_of_patience)], device=self.s.device)
            out_of_patience = self.group.sum(flag).item() > 0
        return out_of_patience


class JsonLog:
    """`--log-json FILE`: one JSON object per line per logging step (and per evaluation),
    flushed as written so a dashboard can follow the file."""

    def __init__(self, path: Path | None):
        self.path, self.file, self.t0 = path, None, time.perf_counter()

    def __enter__(self) -> JsonLog:
        if self.path is not None:
            self.file = open(self.path, "a", encoding="utf-8")
        return self

    def __exit__(self, *exc) -> None:
        if self.file is not None:
            self.file.close()

    def write(self, **fields: Any) -> None:
        if self.file is not None:
            fields["elapsed_s"] = round(time.perf_counter() - self.t0, 3)
            self.file.write(json.dumps(fields) + "\n")
            self.file.flush()


def _bar(total: int, initial: int, *, quiet: bool):
    from tqdm import tqdm

    # smoothing=0: the rate shown is the average so far, not a swinging moving average
    return tqdm(total=total, initial=initial, desc="train", unit="step", leave=False,
                smoothing=0, disable=True if quiet else None)


def _signal_name(signum: int) -> str:
    import signal

    return signal.Signals(signum).name


def _describe(row: dict[str, float]) -> str:
    return "  ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
