"""The training curve as inline SVG, drawn on the server (no JavaScript, no CDN).

`metrics.validation` in a manifest is a list of `{"epoch": 1, "train_loss": ..., "accuracy":
..., ...}`. Losses and scores live on different scales, so each gets its own panel: series
whose name contains "loss" in one, every other metric in the other. Colours come from CSS
classes (`series-0`...), so the chart follows the page's light or dark theme.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

WIDTH, HEIGHT = 360, 210
LEFT, RIGHT, TOP, BOTTOM = 44, 10, 10, 38
SERIES_CLASSES = 6


@dataclass(frozen=True)
class Panel:
    title: str
    series: dict[str, list[tuple[int, float]]]  # metric -> [(epoch, value)], by epoch

    @property
    def legend(self) -> list[tuple[str, str]]:
        """(metric name, CSS class of its colour and dash pattern), in drawing order."""
        return [(name, f"series-{i % SERIES_CLASSES}") for i, name in enumerate(self.series)]

    @property
    def twins(self) -> dict[str, str]:
        """Series drawn exactly over an earlier one: {metric: the earlier metric}. The
        legend says so, since one line hides the other."""
        out: dict[str, str] = {}
        names = list(self.series)
        for i, name in enumerate(names):
            same = next((n for n in names[:i] if self.series[n] == self.series[name]), None)
            if same is not None:
                out[name] = same
        return out


def panels(epochs: list[dict[str, Any]]) -> list[Panel]:
    """The loss panel and the score panel (each only if it has a finite value to draw)."""
    points: dict[str, list[tuple[int, float]]] = {}
    for row in sorted(epochs, key=lambda r: r.get("epoch", 0)):
        for name, value in row.items():
            if name != "epoch" and finite(value) and isinstance(row.get("epoch"), int):
                points.setdefault(name, []).append((row["epoch"], float(value)))
    losses = {k: v for k, v in points.items() if "loss" in k}
    scores = {k: v for k, v in points.items() if "loss" not in k}
    return [Panel(title, series) for title, series in (("Loss", losses), ("Scores", scores))
            if series]


def finite(value: Any) -> bool:
    """A number that can be drawn or compared: not a bool, not NaN or infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def nice_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """About `count` round tick values covering [low, high] (steps of 1, 2, 2.5 or 5 x 10^k).
    A flat series gets a band around it that stays on its side of 0 (scores and losses are
    not negative): all zeros read 0 to 1, not -0.5 to 0.5."""
    if high <= low:
        if low == 0:
            high = 1.0
        else:
            pad = abs(low) * 0.1
            low, high = (max(low - pad, 0.0) if low > 0 else low - pad), high + pad
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    # The epsilon keeps float noise (0.7 / 0.05 = 13.999...) from adding a needless tick.
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    return [round(i * step, 12) for i in range(first, last + 1)]


def label(name: str) -> str:
    """A metric as the legend names it: the per-epoch "loss" is the validation loss."""
    return "validation loss" if name == "loss" else name.replace("_", " ")


def fmt(value: float) -> str:
    """A tick or tooltip number: at most 4 significant digits, no trailing zeros."""
    return f"{value:.4g}"


def render(panel: Panel, chart_id: str) -> Markup:
    """One panel as an accessible <svg> (role img, title and description, point tooltips)."""
    epochs = sorted({e for series in panel.series.values() for e, _ in series})
    values = [v for series in panel.series.values() for _, v in series]
    yticks = nice_ticks(min(values), max(values))
    x0, x1 = epochs[0], epochs[-1]
    y0, y1 = yticks[0], yticks[-1]

    def x(epoch: float) -> float:
        span = WIDTH - LEFT - RIGHT
        return LEFT + (span / 2 if x1 == x0 else (epoch - x0) / (x1 - x0) * span)

    def y(value: float) -> float:
        return TOP + (1 - (value - y0) / (y1 - y0)) * (HEIGHT - TOP - BOTTOM)

    names = ", ".join(label(n) for n in panel.series)
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-labelledby="{chart_id}-t {chart_id}-d" xmlns="http://www.w3.org/2000/svg">',
             f'<title id="{chart_id}-t">{escape(panel.title)} per epoch</title>',
             f'<desc id="{chart_id}-d">{escape(names)} for epochs {x0} to {x1}</desc>']
    for tick in yticks:
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(tick):.1f}" '
                     f'y2="{y(tick):.1f}"/><text class="tick" x="{LEFT - 6}" y="{y(tick) + 4:.1f}" '
                     f'text-anchor="end">{fmt(tick)}</text>')
    for epoch in _thin(epochs):
        parts.append(f'<text class="tick" x="{x(epoch):.1f}" y="{HEIGHT - BOTTOM + 17}" '
                     f'text-anchor="middle">{epoch}</text>')
    parts.append(f'<text class="axis" x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 4}" '
                 'text-anchor="middle">epoch</text>')
    for name, css in panel.legend:
        series = panel.series[name]
        coords = " ".join(f"{x(e):.1f},{y(v):.1f}" for e, v in series)
        parts.append(f'<polyline class="line {css}" points="{coords}"/>')
        for e, v in series:
            parts.append(f'<circle class="dot {css}" cx="{x(e):.1f}" cy="{y(v):.1f}" r="3.5">'
                         f'<title>{escape(label(name))}, epoch {e}: {fmt(v)}</title></circle>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _thin(epochs: list[int], most: int = 12) -> list[int]:
    """At most `most` epoch labels, evenly spread, always including the last."""
    if len(epochs) <= most:
        return epochs
    step = math.ceil(len(epochs) / most)
    return sorted(set(epochs[::step]) | {epochs[-1]})


def ablation(analysis: dict[str, Any], chart_id: str = "ablation") -> Markup | None:
    """The layer-ablation heatmap of `hub ablate --record` (Houlsby et al., Fig. 6) as inline
    SVG: cell (i, j) is the score with the adapters of layers i..j removed; darker is higher.
    None when the manifest has no ablation, or one too odd to draw."""
    a = (analysis or {}).get("ablation") if isinstance(analysis, dict) else None
    spans = a.get("spans") if isinstance(a, dict) else None
    if not spans or not all(isinstance(row, list) and len(row) == len(spans) for row in spans):
        return None
    cells = [(i, j, float(v)) for i, row in enumerate(spans) for j, v in enumerate(row)
             if finite(v)]
    if not cells:
        return None
    n, cell, pad = len(spans), 34, 40
    low, high = min(v for *_, v in cells), max(v for *_, v in cells)
    size = pad + n * cell
    metric = escape(str(a.get("metric", "score")))
    parts = [f'<svg class="chart heatmap" viewBox="0 0 {size + 8} {size + 8}" '
             f'width="{(size + 8) * 1.5:g}" height="{(size + 8) * 1.5:g}" role="img" '
             f'aria-labelledby="{chart_id}-t" xmlns="http://www.w3.org/2000/svg">',
             f'<title id="{chart_id}-t">{metric} with the adapters of layers i to j removed'
             '</title>']
    for k in range(n):
        parts.append(f'<text class="tick" x="{pad + k * cell + cell / 2}" y="{pad - 8}" '
                     f'text-anchor="middle">{k}</text><text class="tick" x="{pad - 8}" '
                     f'y="{pad + k * cell + cell / 2 + 4}" text-anchor="end">{k}</text>')
    for i, j, v in cells:
        shade = 0.15 + 0.85 * ((v - low) / (high - low) if high > low else 1.0)
        x, y = pad + j * cell, pad + i * cell
        parts.append(f'<rect class="heat" x="{x}" y="{y}" width="{cell - 2}" height="{cell - 2}" '
                     f'fill-opacity="{shade:.2f}"><title>layers {i}-{j} removed: {fmt(v)}'
                     f'</title></rect><text class="cell" x="{x + cell / 2 - 1}" '
                     f'y="{y + cell / 2 + 3}" text-anchor="middle">{v:.2f}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
