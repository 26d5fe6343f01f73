"""Checks of `hub train`'s settings that need no model and no data, run before either loads:
a bad option costs a one-line error, not a loaded base and a tokenised data set."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from hubcli.errors import OptionError
from hubcli.format.vocab import VERSION

if TYPE_CHECKING:
    from hubcli.local.train import TrainSettings


def check_settings(s: TrainSettings) -> None:
    """Refuse settings no training run could use.

    Raises:
        OptionError: naming the option, its value and the rule it breaks.
        ModelError: the base's config.json is missing or unreadable (to count its layers).
    """
    if s.lr is not None and not (math.isfinite(s.lr) and s.lr > 0):
        raise OptionError("--lr", s.lr, "the learning rate must be a positive number",
                          hint="leave it out for the default (1e-3; full fine-tune 5e-5)")
    if not (math.isfinite(s.init_scale) and s.init_scale >= 0):
        raise OptionError("--init-scale", s.init_scale, "must be a number >= 0 (a standard deviation)",
                          hint="leave it out for the default (1e-3)")
    if not VERSION.match(s.version):
        raise OptionError("--version", repr(s.version), "is not a semantic version",
                          hint="use MAJOR.MINOR.PATCH, e.g. 0.1.0 or 1.2.0-rc.1")
    if s.layers is not None:
        _check_layers(s.layers, s.base, s.base_revision)


def _check_layers(layers: tuple[int, ...], base: str | None, revision: str | None) -> None:
    """Layer indices must exist in the base: counted from its config.json, weights untouched."""
    from hubcli.base.load import read_config, resolve_base

    name, path = resolve_base(base, revision)
    count = int(read_config(path).get("num_hidden_layers", 0))
    outside = sorted(i for i in set(layers) if not 0 <= i < count)
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
