"""The model card (README.md) of a bundle: Hugging Face YAML front matter plus a readable body,
both derived from the manifest alone, so the same manifest always gives the same card."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hubcli.format.manifest import weights_file
from hubcli.format.vocab import LAYERNORM_WORDS, bottleneck_form

LIBRARY_NAME = "adapter-hub"
ADAPTER_TAG = "houlsby-adapter"
# Our task names -> the Hugging Face pipeline tags (HF files regression under text-classification).
HF_TASKS = {"classification": "text-classification", "regression": "text-classification",
            "tagging": "token-classification", "qa": "question-answering"}
TASK_WORDS = {"classification": "text classification", "regression": "text regression",
              "tagging": "token tagging", "qa": "extractive question answering"}


def dataset_name(manifest: dict[str, Any]) -> str:
    """The training dataset's name: `training.dataset` if recorded, else the training file's
    stem without a "train" suffix ("sst2_train.tsv" -> "sst2"), else the adapter's name."""
    training = manifest.get("training", {})
    if isinstance(training.get("dataset"), str):
        return training["dataset"]
    if training.get("train_data", {}).get("name"):
        stem = Path(training["train_data"]["name"]).stem
        return re.sub(r"[._-]train$", "", stem) or stem
    return manifest["name"]


def validation_metrics(manifest: dict[str, Any]) -> dict[str, float]:
    """The metrics the card reports: `metrics.best`, else the last validation epoch's."""
    metrics = manifest["metrics"]
    if metrics.get("best"):
        return dict(metrics["best"])
    if metrics["validation"]:
        return {k: v for k, v in metrics["validation"][-1].items() if k != "epoch"}
    return {}


def front_matter(manifest: dict[str, Any]) -> str:
    """The YAML front matter: library, base model, relation, tags, datasets, license and a
    model-index with the validation metrics."""
    from huggingface_hub import EvalResult, ModelCardData  # heavy; only the card needs it

    hf_task = HF_TASKS[manifest["task"]]
    dataset = dataset_name(manifest)
    results = [EvalResult(task_type=hf_task, dataset_type=dataset, dataset_name=dataset,
                          dataset_split="validation", metric_type=metric, metric_value=value,
                          metric_name=f"validation {metric}")
               for metric, value in validation_metrics(manifest).items()]
    tags = list(dict.fromkeys([ADAPTER_TAG, hf_task, manifest["task"], *manifest.get("tags", [])]))
    data = ModelCardData(
        library_name=LIBRARY_NAME, base_model=manifest["base_model"]["name"],
        base_model_relation="adapter", tags=tags, datasets=[dataset],
        license=manifest.get("license", "other"), model_name=manifest["name"],
        eval_results=results or None,
    )
    return f"---\n{data.to_yaml()}\n---\n"


def _ranges(values: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out: list[str] = []
    for v in sorted(values):
        if out and out[-1].split("-")[-1] == str(v - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        else:
            out.append(str(v))
    return ", ".join(out)


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _summary(m: dict[str, Any]) -> list[str]:
    names = m["head"]["labels"]
    labels = f" ({len(names)} labels: {', '.join(names)})" if names else ""
    deltas = ", the LayerNorm deltas" if m["architecture"]["layernorm"] != "frozen" else ""
    lines = [f"# {m['name']}", "",
             f"A {_METHOD_WORDS[m['architecture']['type']]}, version {m['version']}, for "
             f"{TASK_WORDS[m['task']]}"
             f"{labels} on the frozen base model `{m['base_model']['name']}`. Only the adapters"
             f"{deltas} and the task head are stored here; the base stays unchanged."]
    if m.get("description"):
        lines += ["", m["description"]]
    return lines


_METHOD_WORDS = {"houlsby": "Houlsby bottleneck adapter", "lora": "LoRA adapter",
                 "fusion": "AdapterFusion of the adapters it requires"}


def _method_rows(arch: dict[str, Any]) -> list[tuple[str, str]]:
    if arch["type"] == "fusion":
        return [("Fusion", f"AdapterFusion over the required adapters at "
                           f"{' and '.join(arch['placement'])} in layers {_ranges(arch['layers'])}")]
    if arch["type"] == "lora":
        return [("Rank", f"r = {arch['rank']}, alpha = {arch['alpha']:g} (updates (alpha / r) B A x)"),
                ("Placement", f"the attention {' and '.join(arch['placement'])} projections in "
                              f"layers {_ranges(arch['layers'])}")]
    rows = [("Bottleneck size", f"m = {arch['bottleneck']} (each adapter maps d -> m -> d)"),
            ("Placement", f"after {' and '.join(arch['placement'])} in layers "
                          f"{_ranges(arch['layers'])}, {arch['non_linearity']} non-linearity")]
    if form := bottleneck_form(arch):
        rows.append(("Form", f"the sublayer computes {form} (h: its output projection, "
                             "x: its input, f: the bottleneck)"))
    return rows


def _details(m: dict[str, Any]) -> list[str]:
    base, arch, params, head = m["base_model"], m["architecture"], m["parameters"], m["head"]
    weights_name = weights_file(m)
    weights = next((f["sha256"] for f in m["files"] if f["path"] == weights_name), None)
    revision = f" (revision `{base['revision']}`)" if base.get("revision") else ""
    rows = [
        ("Base model", f"`{base['name']}`{revision}, {base['model_type']}, hidden size "
                       f"{base['hidden_size']}, {base['num_layers']} layers"),
        ("Base content hash", f"`{base['content_hash']}`"),
        ("Tokenizer hash", f"`{base['tokenizer_hash']}`"),
        *_method_rows(arch),
        ("LayerNorm", LAYERNORM_WORDS[arch["layernorm"]]),
        ("Head", f"{head['type']}, {head['num_outputs']} outputs"
                 + (f", {head['pooling']} pooling" if head.get("pooling") else "")),
        ("Trainable parameters", f"{params['trainable']:,} = {params['share'] * 100:.2f}% of "
                                 f"the base's {params['base']:,}"),
    ]
    if weights:
        rows.append(("Weights", f"`{weights_name}`, sha256 `{weights}`"))
    rows += [("Requires", f"`{r.get('ref', r['name'])}` {r['version']}, manifest sha256 "
                          f"`{r['manifest_sha256']}`") for r in m.get("requires", ())]
    return ["", "## Model details", "", "| | |", "|---|---|",
            *(f"| {k} | {v} |" for k, v in rows)]


def _metrics(m: dict[str, Any]) -> list[str]:
    epochs, primary = m["metrics"]["validation"], m["metrics"].get("primary")
    lines = ["", "## Validation metrics", ""]
    if not epochs:
        return lines + ["No validation metrics were recorded."]
    names = sorted({k for e in epochs for k in e if k != "epoch"}, key=lambda k: (k != primary, k))
    lines += ["| epoch | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    lines += [f"| {e['epoch']} | " + " | ".join(_fmt(e.get(k, "")) for k in names) + " |"
              for e in epochs]
    best = validation_metrics(m)
    best_epoch = m.get("training", {}).get("best_epoch")
    chosen = f" (epoch {best_epoch}, chosen by {primary})" if best_epoch and primary else ""
    return lines + ["", f"Reported{chosen}: "
                    + ", ".join(f"{k} {_fmt(v)}" for k, v in best.items()) + "."]


def _training(m: dict[str, Any]) -> list[str]:
    t = m.get("training", {})
    lines = ["", "## Training", ""]
    for key, label in (("train_data", "Training data"), ("validation_data", "Validation data")):
        if key in t:
            d = t[key]
            lines.append(f"- {label}: `{d.get('name', '?')}`, {d['examples']:,} examples, "
                         f"sha256 `{d['sha256']}`")
    settings = [(k, t[k]) for k in ("epochs", "learning_rate", "batch_size", "max_length",
                                    "warmup_ratio", "optimizer", "seed") if k in t]
    if settings:
        lines.append("- Settings: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in settings))
    return lines


def _ablation(m: dict[str, Any]) -> list[str]:
    a = m.get("analysis", {}).get("ablation")
    if not a:
        return []
    spans, metric = a["spans"], a["metric"]
    n = len(spans)
    lines = ["", "## Layer ablation", "",
             f"{metric} on `{a['data']}` with the adapter modules of some layers removed "
             "(LayerNorm deltas and head kept; Houlsby et al. 2019, Fig. 6): full adapter "
             f"{_fmt(a['full'])}, all layers removed {_fmt(spans[0][n - 1])}"
             + (f", majority class {_fmt(a['majority'])}" if a.get("majority") is not None else "")
             + ".", "", "| layer removed | " + " | ".join(str(i) for i in range(n)) + " |",
             "|---" * (n + 1) + "|", f"| {metric} | "
             + " | ".join(_fmt(spans[i][i]) for i in range(n)) + " |"]
    if a.get("drop"):
        lines += ["", "Adapters of the lowest k layers skipped (AdapterDrop): "
                  + ", ".join(f"k={d['dropped']}: {_fmt(d[metric])} at {d['examples_per_s']:g} "
                              "examples/s" for d in a["drop"]) + "."]
    return lines


def _usage(m: dict[str, Any]) -> list[str]:
    name, version = m["name"], m["version"]
    return ["", "## How to use", "", "```bash",
            f"hub pull NAMESPACE/{name}@{version}   # downloads, then checks signature and digests",
            f"hub predict NAMESPACE/{name} \"a text to run the adapter on\"",
            "```", "",
            "`hub pull` refuses a bundle whose signature or file digests do not verify; "
            "`hub predict` loads the base model above, checks its content hash against the one "
            "recorded here, and only then attaches the adapter. Replace NAMESPACE with the "
            "registry namespace the adapter was published under."]


def render_model_card(manifest: dict[str, Any]) -> str:
    """README.md text for `manifest`: YAML front matter, then a Markdown body describing what
    the adapter does, its base and hash, bottleneck size, parameter share, metrics and usage."""
    body = [*_summary(manifest), *_details(manifest), *_metrics(manifest),
            *_ablation(manifest), *_training(manifest), *_usage(manifest)]
    return front_matter(manifest) + "\n" + "\n".join(body) + "\n"
