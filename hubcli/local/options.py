"""Checks of `hub train`'s settings that need no model and no data, run before either loads:
a bad option costs a one-line error, not a loaded base and a tokenised data set."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from hubcli.errors import OptionError
from hubcli.format.vocab import VERSION

if TYPE_CHECKING:
    from hubcli.local.train import TrainSettings


def check_settings(s: TrainSettings) -> None:
    """Refuse settings no training run could use, and an output folder it may not write.

    Raises:
        OptionError: naming the option, its value and the rule it breaks.
        ModelError: the base is not found, or its config.json is missing or unreadable.
        UnsupportedModelError: the base's model type has no adapter targets.
    """
    if s.lr is not None and not (math.isfinite(s.lr) and s.lr > 0):
        raise OptionError("--lr", s.lr, "the learning rate must be a positive number",
                          hint="leave it out for the default (1e-3; full fine-tune 5e-5)")
    if s.init_scale is not None and not (math.isfinite(s.init_scale) and s.init_scale >= 0):
        raise OptionError("--init-scale", s.init_scale, "must be a number >= 0 (a standard deviation)",
                          hint="leave it out for the default (1e-3; tagging 2e-2)")
    if not VERSION.match(s.version):
        raise OptionError("--version", repr(s.version), "is not a semantic version",
                          hint="use MAJOR.MINOR.PATCH, e.g. 0.1.0 or 1.2.0-rc.1")
    check_out(Path(s.out), overwrite=s.overwrite)
    check_schedule(s)
    _check_base(s.base, s.base_revision, s.layers)


def check_schedule(s: TrainSettings) -> None:
    """Steps, evaluation and checkpoint options that go together (local/loop.py).

    Raises:
        OptionError: --max-steps with --epochs, --patience without --validation, --resume
            without a checkpoint, or --log-json in a folder that does not exist.
    """
    from hubcli.local.checkpoint import path_for

    if s.max_steps is not None and s.epochs is not None:
        raise OptionError("--max-steps", s.max_steps, "and --epochs both set the run's length",
                          hint="give one of them")
    if s.patience is not None and s.validation is None:
        raise OptionError("--patience", s.patience, "stops when the validation score stops "
                          "improving, and there is no --validation data",
                          hint="add --validation FILE, or drop --patience")
    if s.resume and not path_for(Path(s.out)).is_file():
        raise OptionError("--resume", path_for(Path(s.out)), "no checkpoint there",
                          hint="train without --resume (with --checkpoint-every N to write one)")
    if s.log_json is not None and not Path(s.log_json).parent.is_dir():
        raise OptionError("--log-json", s.log_json, "its folder does not exist",
                          hint="create the folder, or name a file in one that exists")


def check_out(out: Path, *, overwrite: bool, markers: tuple[str, ...] | None = None,
              what: str = "a trained adapter", writer: str = "`hub train`") -> None:
    """`out` can take a trained folder: new, empty, or (with `overwrite`) a trained folder,
    which is replaced only once training succeeded (`fsutil.staged_dir`). Other folders hub
    writes name their own: a folder holding one of `markers` is `what` `writer` writes.

    Raises:
        OptionError: `out` is a file, the current folder or above it, a folder with files
            (without `overwrite`, or not a folder of its kind), or in a folder that cannot be
            written.
    """
    from hubcli.format.manifest import MANIFEST
    from hubcli.local.finetune_dir import MARKER

    markers = markers or (MANIFEST, MARKER)
    here = Path.cwd()
    if out.exists() and not out.is_dir():
        raise OptionError("--out", out, "is a file, not a folder", hint="choose a folder name")
    if out.resolve() in (here, *here.parents):
        raise OptionError("--out", out, "is the current folder or above it",
                          hint="name a folder for the adapter, e.g. --out ./my-adapter")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise OptionError("--out", out, "exists already",
                              hint="pass --overwrite to replace it, or choose another --out")
        if not any((out / m).is_file() for m in markers):
            raise OptionError("--out", out, f"holds files that are not {what}; "
                              f"--overwrite replaces only a folder {writer} wrote",
                              hint="choose a new or empty folder")
    check_writable(out)


def check_writable(out: Path) -> None:
    """The folder that will hold `out` (its nearest existing ancestor) must be writable: the
    trained folder is staged beside `out` and renamed into place.

    Raises:
        OptionError: that ancestor is a file, or cannot be written.
    """
    parent = out.resolve().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise OptionError("--out", out, f"{parent} is a file, not a folder",
                          hint="choose a path inside a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OptionError("--out", out, f"cannot write in {parent}",
                          hint="choose a folder you can write to")


def _check_base(base: str | None, revision: str | None, layers: tuple[int, ...] | None) -> None:
    """The base exists, its model type is supported, and `layers` exist in it: all read from
    its config.json, weights untouched."""
    from hubcli.base.load import read_config, resolve_base
    from hubcli.core.targets import targets_for

    name, path = resolve_base(base, revision)
    config = read_config(path)
    targets_for(config.get("model_type", "?"))
    count = int(config.get("num_hidden_layers", 0))
    outside = sorted(i for i in set(layers or ()) if not 0 <= i < count)
    if count and outside:
        raise OptionError("--layers", _span(layers), f"no such layer: the base {name} has {count} "
                          f"layers, numbered 0-{count - 1}",
                          hint=f"use e.g. 'all' or '0-{count - 1}'")


def _span(layers: tuple[int, ...]) -> str:
    """The layers as a user would have typed them: '0-20' for a run, else '0,2,4'."""
    ordered = sorted(set(layers))
    if len(ordered) > 1 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(map(str, ordered))
