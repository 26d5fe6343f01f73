"""How values read on the page: Jinja filters (sizes, counts, dates, hashes) and the manifest
"at a glance" rows. Every manifest field is read defensively: a page must render for any
version the registry accepted, including ones pushed under an older schema."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from flask import Flask
from markupsafe import Markup

from hubcli.bundle.card import validation_metrics
from hubcli.format.vocab import LAYERNORM_WORDS, bottleneck_form
from registry_server.models import as_utc
from registry_server.ui.chart import finite
from registry_server.ui.chart import label as metric_label
from registry_server.ui.markdown import card_license

Rows = list[tuple[str, str]]


def filesize(size: int) -> str:
    """1536 -> "1.5 KiB"."""
    if size < 1024:
        return f"{size} B"
    exponent = min(int(math.log(size, 1024)), 3)
    return f"{size / 1024 ** exponent:.1f} {('KiB', 'MiB', 'GiB')[exponent - 1]}"


def number(value: int | float) -> str:
    """12345 -> "12,345"; floats keep 4 significant digits."""
    return f"{value:,}" if isinstance(value, int) else f"{value:.4g}"


def date(moment: datetime | None) -> Markup:
    """A <time> element showing the UTC day, with the full time as its tooltip."""
    if moment is None:
        return Markup("")
    moment = as_utc(moment)
    return Markup('<time datetime="{0}" title="{1}">{2}</time>').format(
        moment.isoformat(timespec="seconds"), moment.strftime("%Y-%m-%d %H:%M UTC"),
        moment.strftime("%Y-%m-%d"))


def short_hash(value: str | None, keep: int = 12) -> str:
    """"sha256:0123456789abcdef..." -> "sha256:0123456789ab…"."""
    if not value:
        return ""
    algo, _, digest = value.rpartition(":")
    return (f"{algo}:" if algo else "") + (digest[:keep] + "…" if len(digest) > keep else digest)


def words(value: str | None) -> str:
    """"attention_output" -> "attention output"."""
    return (value or "").replace("_", " ")


def base_rows(manifest: dict[str, Any]) -> Rows:
    base = manifest.get("base_model", {})
    rows = [("Model", base.get("name", "?")),
            ("Revision", base.get("revision") or "not pinned"),
            ("Type", f"{base.get('model_type', '?')}, hidden size {base.get('hidden_size', '?')},"
                     f" {base.get('num_layers', '?')} layers")]
    if isinstance(base.get("num_parameters"), int):
        rows.append(("Parameters", number(base["num_parameters"])))
    return rows


def architecture_rows(manifest: dict[str, Any]) -> Rows:
    arch, params = manifest.get("architecture", {}), manifest.get("parameters", {})
    if arch.get("type") == "lora":
        rows = [("Method", "LoRA"),
                ("Rank", f"{arch.get('rank', '?')} (alpha {arch.get('alpha', '?')})")]
    elif arch.get("type") == "fusion":
        rows = [("Method", "AdapterFusion over the adapters it uses")]
    else:
        bottleneck = arch.get("bottleneck", "?")
        rows = [("Bottleneck", f"{bottleneck} (each adapter maps d → {bottleneck} → d)")]
    rows += [("Placement", ", ".join(words(p) for p in arch.get("placement", [])) or "?"),
             ("Layers", _layers(arch.get("layers", []),
                                manifest.get("base_model", {}).get("num_layers")))]
    if "non_linearity" in arch:
        rows.append(("Non-linearity", arch["non_linearity"]))
    if form := bottleneck_form(arch):
        rows.append(("Form", form))
    rows.append(("LayerNorm", LAYERNORM_WORDS.get(arch.get("layernorm"), "frozen")))
    if isinstance(params.get("trainable"), int):
        share = params.get("share")
        of_base = f" ({share:.2%} of the base)" if isinstance(share, (int, float)) else ""
        rows.append(("Trainable parameters", number(params["trainable"]) + of_base))
        parts = [f"{k} {number(params[k])}" for k in ("adapters", "fusion", "layernorm", "head")
                 if isinstance(params.get(k), int)]
        if parts:
            rows.append(("Split", ", ".join(parts)))
    return rows


def _layers(layers: list[int], total: int | None) -> str:
    if total and sorted(layers) == list(range(total)):
        return f"all {total}"
    return ", ".join(str(n) for n in sorted(layers)) or "?"


def head_rows(manifest: dict[str, Any]) -> Rows:
    head = manifest.get("head", {})
    rows = [("Type", words(head.get("type"))), ("Outputs", str(head.get("num_outputs", "?")))]
    for key, label in (("pooling", "Pooling"), ("label_scheme", "Label scheme")):
        if head.get(key):
            rows.append((label, str(head[key])))
    return rows


def _reported(manifest: dict[str, Any]) -> dict[str, Any]:
    """The validation metrics the card reports (never the training loss)."""
    try:
        metrics = validation_metrics(manifest)
    except (KeyError, TypeError, AttributeError):
        return {}
    return {k: v for k, v in metrics.items() if not k.startswith("train")}


def best_metrics(manifest: dict[str, Any]) -> Rows:
    """The reported validation metrics (the card's choice: `metrics.best` or the last epoch),
    the primary metric first, labelled as the chart's legend reads them."""
    primary = manifest.get("metrics", {}).get("primary")
    ordered = sorted(_reported(manifest).items(), key=lambda kv: (kv[0] != primary, kv[0]))
    return [(metric_label(name), number(value) if isinstance(value, (int, float)) else str(value))
            for name, value in ordered]


def primary_metric(manifest: dict[str, Any]) -> tuple[str, str] | None:
    """(label, value) of the metric the adapter was selected by, for headers and result
    cards; None when nothing was recorded."""
    rows = best_metrics(manifest)
    return rows[0] if rows else None


def metric_warnings(manifest: dict[str, Any]) -> list[str]:
    """Why the reported metrics suggest a model that learnt nothing: an F1, precision or
    recall of 0 (no correct positive at all), or an accuracy no better than always answering
    the majority class (known when `hub ablate --record` measured it)."""
    found, warnings = _reported(manifest), []
    zero = [metric_label(k) for k, v in found.items() if finite(v) and v == 0
            and any(part in k for part in ("f1", "precision", "recall"))]
    if zero:
        warnings.append(f"{', '.join(zero)} {'is' if len(zero) == 1 else 'are'} 0: the model "
                        "finds no correct positive at all (it may predict one class only).")
    ablation = (manifest.get("analysis") or {}).get("ablation") or {}
    majority, accuracy = ablation.get("majority"), found.get("accuracy")
    if finite(majority) and finite(accuracy) and accuracy <= majority + 0.005:
        warnings.append(f"accuracy {number(accuracy)} is no better than always answering the "
                        f"most frequent class ({number(majority)}).")
    return warnings


def plural(count: int, word: str) -> str:
    """(1, "download") -> "1 download"; (1234, "download") -> "1,234 downloads"."""
    return f"{number(count)} {word}{'' if count == 1 else 's'}"


def license_of(manifest: dict[str, Any], card: str) -> str | None:
    """The license the manifest names, else the one in the model card's front matter."""
    if isinstance(manifest.get("license"), str) and manifest["license"].strip():
        return manifest["license"].strip()
    return card_license(card)


def metric_names(epochs: list[dict[str, Any]]) -> list[str]:
    """The metric columns of the per-epoch table, in first-seen order."""
    return list(dict.fromkeys(k for row in epochs for k in row if k != "epoch"))


def init_app(app: Flask) -> None:
    app.add_template_filter(filesize)
    app.add_template_filter(number)
    app.add_template_filter(date)
    app.add_template_filter(short_hash)
    app.add_template_filter(words)
    app.add_template_filter(plural)
    app.add_template_filter(metric_label, "metric_label")
    app.add_template_filter(primary_metric)
    app.add_template_filter(metric_warnings)
