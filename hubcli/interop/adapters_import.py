"""`hub import DIR --out OUT`: an adapter saved by the `adapters` library (AdapterHub's
`save_adapter`) as one of our adapter folders, computing the same logits.

Read: adapter_config.json, adapter.safetensors or pytorch_adapter.bin, head_config.json and
model_head.safetensors or pytorch_model_head.bin. A `.bin` is opened only with PyTorch's
restricted loader (`weights_only=True`); one that needs a full unpickler is refused, naming the
file, and what is read is written back as safetensors at once.

Mapped: the library's bottlenecks onto our Houlsby method in the form that computes the same
in eval mode (`adapters_format` writes out each): "double_seq_bn" (Houlsby: reads the
sublayer's output after dense + dropout, the sublayer's residual add and LayerNorm follow) as
it is; "seq_bn" (Pfeiffer: `original_ln_before`, the adapter reads past the sublayer's
residual add and LayerNorm) with `reads` normed and `skip` by its `residual_before_ln` (true:
output, false: normed, "post_add": sum); "par_bn" (`is_parallel`: reads the sublayer's input)
with `reads` input. `scaling` (a number) is folded into the up-projection;
`mh_adapter`/`output_adapter` are our placements, `leave_out` the layers left out, swish is
silu. Its LoRA on q and v is our LoRA ((alpha / r) B A x in both). Its heads
(`adapters_format.HEADS`): classification (first token, dense, tanh, out) is our sequence
classification head with CLS pooling, or with num_labels 1 (STS-B's) our regression head;
tagging is our tagging head; question_answering (one Linear, [start, end] per token) is our QA
head. What our methods and heads cannot compute the same (`original_ln_after` false, adapter
LayerNorms, gating, PHM, invertible adapters, learned scaling, LoRA on k or the feed-forward,
DoRA, VeRA; head layers other than theirs by default, another activation, `use_pooler`, no
bias, multi-label, multiple-choice and other head types) is refused naming the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from hubcli.errors import AdapterError, UsageError
from hubcli.format.vocab import DEFAULT_MAX_LENGTH
from hubcli.interop.adapters_format import (ACTIVATIONS, ADAPTER_CONFIG, ADAPTER_KEY,
                                            LEGACY_ACTIVATIONS, LEGACY_NAMES,
                                            ADAPTER_WEIGHTS, FORMS, HEAD_CONFIG, HEAD_WEIGHTS,
                                            HEADS, LIBRARY, LORA_KEY, LORA_MATRICES,
                                            LORA_REQUIRED, PLACEMENTS, REQUIRED)


HF_SCHEME = "hf://"


def import_adapters(src: str, out: Path, *, base: str | None = None, name: str | None = None,
                    notify: Callable[[str], None] = lambda _m: None) -> dict:
    """`import_adapters_dir` for a folder, or for `hf://NS/NAME[@REVISION]`: the library's
    files downloaded from the Hugging Face Hub (HF_ENDPOINT if set) into a temporary folder
    first (the name defaults to the repository's).

    Raises:
        UsageError: neither a folder nor an hf:// reference. NotFoundError, AuthError,
            RegistryError: the download failed. And what `import_adapters_dir` raises.
    """
    if not src.startswith(HF_SCHEME):
        folder = Path(src)
        if not folder.is_dir():
            raise UsageError(f"{src}: no such folder",
                             hint="give the folder save_adapter wrote, or hf://NS/NAME")
        return import_adapters_dir(folder, out, base=base, name=name, notify=notify)
    import tempfile

    from hubcli.remote.client import download_snapshot
    from hubcli.remote.credentials import hf_remote

    repo_id, _, revision = src[len(HF_SCHEME):].partition("@")
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise UsageError(f"{src}: expected hf://NS/NAME or hf://NS/NAME@REVISION",
                         hint="e.g. hf://AdapterHub/bert-base-uncased-pf-sst2")
    remote = hf_remote(progress=False)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".hub-import-") as tmp:
        notify(f"downloading {repo_id} from {remote.endpoint}")
        folder = download_snapshot(remote, repo_id, revision or "main", Path(tmp), patterns=(
            ADAPTER_CONFIG, HEAD_CONFIG, *ADAPTER_WEIGHTS, *HEAD_WEIGHTS))
        # the snapshot folder is named by the commit downloaded: pin it in the manifest
        return import_adapters_dir(folder, out, base=base, name=name or repo_id.split("/")[1],
                                   location=f"{HF_SCHEME}{repo_id}@{folder.name}",
                                   notify=notify)


def import_adapters_dir(src: Path, out: Path, *, base: str | None = None, name: str | None = None,
                        location: str | None = None,
                        notify: Callable[[str], None] = lambda _m: None) -> dict:
    """Write our adapter folder `out` from the `adapters`-library folder `src`; returns the
    manifest. The base is `base`, else the config's `model_name`; `location` is what the
    manifest says was imported (default: the folder's name).

    Raises:
        AdapterError: a missing or unreadable file, a pickle that needs a full unpickler, a
            configuration field our methods cannot reproduce (named), or weights that do not
            fit the base.
        ModelError: the base cannot be loaded.
    """
    from hubcli.base.load import load_base
    from hubcli.core.model import AdapterModel
    from hubcli.local.adapterdir import framework_versions, now_iso, safe_name, write_adapter_dir
    from hubcli.signing.policy import record_trained

    src = Path(src)
    doc, head_doc = _read_json(src / ADAPTER_CONFIG), _read_json(src / HEAD_CONFIG)
    loaded = load_base(base or doc.get("model_name"))
    _check_base(doc, base, loaded.info, notify)
    num_layers = loaded.info.num_layers
    config, scaling = method_config(doc, num_layers)
    task, head = head_config(head_doc)
    tensors = {**adapter_tensors(read_library_weights(src, ADAPTER_WEIGHTS), scaling),
               **head_tensors(read_library_weights(src, HEAD_WEIGHTS), head.type)}
    name = safe_name(name or doc.get("name") or src.name)
    location = location or src.name
    model = AdapterModel(loaded.encoder)
    model.add_adapter(name, config, head)
    try:
        model.load_adapter_state(name, tensors)  # checks names and shapes against the base
    except AdapterError as e:
        raise AdapterError(f"its weights do not fit the base {loaded.info.name} "
                           f"({loaded.info.num_layers} layers, hidden size "
                           f"{loaded.info.hidden_size}): {e}",
                           hint="pass --base with the model it was saved for"
                                + (f" ({doc['model_name']})" if doc.get("model_name") else "")
                           ) from None
    counts = model.parameter_counts(name)
    manifest = {
        "schema_version": 1, "name": name, "version": "0.1.0",
        "description": f"imported from {location} ({LIBRARY} {_library_version(doc)})",
        "task": task, "head": head.to_manifest(), "base_model": loaded.info.to_manifest(),
        "architecture": config.to_manifest(num_layers),
        "parameters": {**counts, "share": round(counts["trainable"] / counts["base"], 6)},
        "training": {"max_length": DEFAULT_MAX_LENGTH}, "metrics": {"validation": []},
        "files": [], "created": now_iso(), "framework": framework_versions(),
        "source": {"library": LIBRARY, "version": _library_version(doc), "config": doc,
                   "head_config": head_doc, "location": location},
    }
    manifest = write_adapter_dir(Path(out), manifest, model.adapter_state_dict(name))
    record_trained(Path(out))  # made here from weights read without a full unpickler
    notify(f"imported {location} ({config.method}, {task}) on base {loaded.info.name}")
    return manifest


def _check_base(doc: dict, base: str | None, info, notify: Callable[[str], None]) -> None:
    """The base `info` (loaded from `base`, else the config's `model_name`) is of the config's
    model type; another model than it names is warned of: the manifest pins the base loaded.

    Raises:
        AdapterError: another model type.
    """
    saved_for, model_type = doc.get("model_name"), doc.get("model_type")
    if model_type is not None and model_type != info.model_type:
        raise AdapterError(f"{ADAPTER_CONFIG}: model_type={json.dumps(model_type)}: it was "
                           f"saved for {saved_for or 'a model of that type'}, and the base "
                           f"{info.name} is a {info.model_type} model",
                           hint=f"pass --base with the {model_type} model it was trained on")
    if base and saved_for and Path(base.rstrip("/")).name != Path(saved_for).name:
        notify(f"warning: the adapter was saved for {saved_for}; importing it on {base}, "
               "which its manifest pins from now on")


def method_config(doc: dict, num_layers: int):
    """(our method's config, the bottleneck scaling to fold in) for an adapter_config.json:
    a bottleneck config (its `architecture` is null) or LoRA.

    Raises:
        AdapterError: another method, or a field our methods cannot reproduce, named.
    """
    cfg = doc.get("config")
    if not isinstance(cfg, dict):
        raise AdapterError(f"{ADAPTER_CONFIG}: 'config' is {cfg!r}, not a configuration",
                           hint="re-save the adapter with the adapters library's save_adapter")
    layers = tuple(i for i in range(num_layers)
                   if i not in {int(j) for j in cfg.get("leave_out") or []})
    if cfg.get("architecture") == "lora":
        return lora_config(cfg, _library_version(doc), layers), 1.0
    if cfg.get("architecture") is not None:
        raise _unsupported("architecture", cfg["architecture"],
                           "only bottleneck adapters and LoRA are imported")
    return houlsby_config(cfg, int(doc.get("hidden_size", 0)), layers,
                          legacy="version" not in doc)


def lora_config(cfg: dict, version: str, layers: tuple[int, ...]):
    """Our LoraConfig for the library's LoRA config: its update is also (alpha / r) B A x.

    Raises:
        AdapterError: a field our LoRA cannot reproduce, named.
    """
    from hubcli.core.config import LoraConfig

    for key, wanted in LORA_REQUIRED.items():
        if cfg.get(key, wanted) != wanted:
            raise _unsupported(key, cfg[key], "our LoRA method cannot compute this variant")
    matrices = cfg.get("attn_matrices", ["q", "v"])
    if not matrices or any(m not in LORA_MATRICES for m in matrices):
        raise _unsupported("attn_matrices", matrices, "our LoRA adapts q and v only")
    for key in ("r", "alpha"):
        if not isinstance(cfg.get(key), (int, float)) or isinstance(cfg.get(key), bool):
            raise _unsupported(key, cfg.get(key), "LoRA needs its rank r and its alpha")
    if _older(version, (1, 1)) and cfg["r"] != cfg["alpha"]:
        # before 1.1.0 the library scaled LoRA differently (its pull request 770)
        raise _unsupported("version", version, "LoRA saved before 1.1.0 with r != alpha")
    return LoraConfig(rank=int(cfg["r"]), alpha=float(cfg["alpha"]), layers=layers,
                      placement=tuple(LORA_MATRICES[m] for m in matrices))


def houlsby_config(cfg: dict, hidden: int, layers: tuple[int, ...], legacy: bool = False):
    """(our HoulsbyConfig, the scaling to fold in) for a bottleneck config; `legacy`: from a
    config without "version", whose activations the library reads by their old names.

    Raises:
        AdapterError: a field our Houlsby method cannot reproduce, named.
    """
    from hubcli.core.config import HoulsbyConfig

    for key, wanted in REQUIRED.items():
        if cfg.get(key, wanted) != wanted:
            raise _unsupported(key, cfg[key], "our Houlsby method cannot compute this variant")
    reads, skip = _form(cfg)
    scaling = cfg.get("scaling", 1.0)
    if isinstance(scaling, bool) or not isinstance(scaling, (int, float)):
        raise _unsupported("scaling", scaling, "only a fixed number is folded into the weights")
    given = str(cfg.get("non_linearity", "relu")).lower()
    act = LEGACY_ACTIVATIONS.get(given, given) if legacy else given
    if act not in ACTIVATIONS:
        raise _unsupported("non_linearity", given, f"a config without \"version\" (saved by "
                           f"adapter-transformers 2.x) means {act} by it, which our adapters "
                           "do not compute" if act != given else
                           f"supported: {', '.join(ACTIVATIONS)}")
    placement = tuple(p for p, on in (("attention_output", cfg.get("mh_adapter")),
                                      ("ffn_output", cfg.get("output_adapter"))) if on)
    if not placement:
        raise _unsupported("mh_adapter", False, "the adapter sits nowhere")
    bottleneck = _bottleneck(cfg.get("reduction_factor", 16), hidden)
    return HoulsbyConfig(bottleneck=bottleneck, layers=layers, non_linearity=ACTIVATIONS[act],
                         placement=placement, layernorm="frozen", reads=reads,
                         skip=skip), float(scaling)


def _form(cfg: dict) -> tuple[str, str]:
    """Our (reads, skip) for the library's is_parallel, original_ln_before and
    residual_before_ln (see `adapters_format`)."""
    parallel = bool(cfg.get("is_parallel", False))
    # its parallel adapter reads neither of the other two; without the LayerNorm before it,
    # its skip connection is h whether residual_before_ln is true or false
    before = bool(cfg.get("original_ln_before", False)) and not parallel
    residual = cfg.get("residual_before_ln", True)
    if parallel or (not before and residual is False):
        residual = True
    theirs = {"is_parallel": parallel, "original_ln_before": before, "residual_before_ln": residual}
    for ours, fields in FORMS.items():
        if fields == theirs:
            return ours
    raise _unsupported("residual_before_ln", residual,
                       "supported: true, false, and \"post_add\" with original_ln_before true")


def head_config(doc: dict):
    """(our task name, HeadConfig) for a head_config.json: its classification head (with
    num_labels 1: regression), tagging head or question-answering head.

    Raises:
        AdapterError: a head type or setting we have no head for, named.
    """
    from hubcli.core.heads import HeadConfig

    cfg = doc.get("config") or {}
    head_type = _our_head_type(cfg.get("head_type"), cfg.get("num_labels"))
    library_head = HEADS[head_type]
    required = {"layers": library_head.layers, "use_pooler": False, "bias": True}
    if library_head.layers > 1:  # a single Linear has no activation
        required["activation_function"] = "tanh"
    for key, wanted in required.items():
        if cfg.get(key, wanted) != wanted:
            raise _unsupported(key, cfg[key], f"our {head_type} head needs {json.dumps(wanted)}",
                               HEAD_CONFIG)
    labels: tuple[str, ...] = ()
    # regression and QA outputs are no labels (the library names them LABEL_i all the same)
    if library_head.num_labels is None:
        by_id = sorted((int(i), label) for label, i in (cfg.get("label2id") or {}).items())
        labels = tuple(label for _, label in by_id) or tuple(
            str(i) for i in range(cfg["num_labels"]))
    head = HeadConfig(type=head_type, num_outputs=int(cfg["num_labels"]), labels=labels,
                      pooling="cls")
    return library_head.task, head


def _our_head_type(kind: Any, num_labels: Any) -> str:
    """Our head type for the library's head_type and num_labels.

    Raises:
        AdapterError: a head type we have no head for, or a num_labels that ours fixes.
    """
    candidates = {ours: h for ours, h in HEADS.items() if h.head_type == kind}
    if not candidates:
        supported = ", ".join(dict.fromkeys(h.head_type for h in HEADS.values()))
        raise _unsupported("head_type", kind, f"supported: {supported}", HEAD_CONFIG)
    for wanted in (num_labels, None):  # a head fixing num_labels before one that does not
        for ours, h in candidates.items():
            if h.num_labels == wanted:
                return ours
    fixed = next(iter(candidates.values())).num_labels
    raise _unsupported("num_labels", num_labels, f"a {kind} head has {fixed}", HEAD_CONFIG)


def adapter_tensors(raw: dict, scaling: float) -> dict:
    """Our tensor names for the library's bottleneck or LoRA tensors, a bottleneck's
    `scaling` folded into `up`.

    Raises:
        AdapterError: a tensor with no counterpart in our methods (named).
    """
    out = {}
    for key, t in raw.items():
        for old, new in LEGACY_NAMES.items():  # as the library renames them on loading
            key = key.replace(old, new)
        if m := LORA_KEY.search(key):
            layer, site, matrix = m.groups()
            out[f"adapters.{layer}.{site}.{matrix}.weight"] = t
        elif m := ADAPTER_KEY.search(key):
            layer, site, proj, kind = m.groups()
            ours = "down" if proj == "adapter_down.0" else "up"
            # up(z) * s == (s W) z + s b: the library scales the up-projection's output
            out[f"adapters.{layer}.{PLACEMENTS[site]}.{ours}.{kind}"] = (
                t * scaling if ours == "up" else t)
        else:
            raise AdapterError(f"tensor {key!r} has no counterpart in our adapters",
                               hint="bottleneck down/up projections and LoRA A/B import")
    return out


def head_tensors(raw: dict, head_type: str) -> dict:
    """Our head tensor names for the library's `heads.NAME.I.weight|bias`.

    Raises:
        AdapterError: a head tensor at an index our head does not have (named).
    """
    index = HEADS[head_type].index
    out = {}
    for key, t in raw.items():
        parts = key.split(".")
        if len(parts) < 3 or parts[-2] not in index:
            raise AdapterError(f"head tensor {key!r} has no counterpart in our {head_type} head")
        out[f"head.{index[parts[-2]]}.{parts[-1]}"] = t
    return out


def _bottleneck(reduction_factor: Any, hidden: int) -> int:
    factors = set(reduction_factor.values()) if isinstance(reduction_factor, dict) else {
        reduction_factor}
    if len(factors) != 1:
        raise _unsupported("reduction_factor", reduction_factor,
                           "one bottleneck size for every layer")
    if hidden < 1:
        raise AdapterError(f"{ADAPTER_CONFIG}: no hidden_size")
    return max(1, int(hidden // factors.pop()))  # as the library sizes its down-projection


def read_library_weights(src: Path, names: tuple[str, str]) -> dict:
    """The tensors of `src`'s safetensors file `names[0]`, else of its pickle `names[1]`
    through the restricted loader.

    Raises:
        AdapterError: neither is there, or readable; the pickle needs a full unpickler.
    """
    safetensors_file, pickle_file = (src / n for n in names)
    if safetensors_file.is_file():
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(safetensors_file))
        except SafetensorError as e:
            raise AdapterError(f"{safetensors_file}: not a readable safetensors file ({e})") \
                from None
    if pickle_file.is_file():
        return _restricted_load(pickle_file)
    raise AdapterError(f"{src}: neither {names[0]} nor {names[1]}",
                       hint="point at a folder written by the adapters library's save_adapter")


def _restricted_load(path: Path) -> dict:
    """Tensors of a PyTorch pickle, read with the restricted loader only."""
    import pickle

    import torch

    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:  # what the restricted loader refuses to build
        raise AdapterError(f"{path.name}: refused: it needs a full unpickler, which could run "
                           f"code ({str(e).splitlines()[0][:120]})",
                           hint="ask its author for safetensors; nothing was unpickled") from None
    except (RuntimeError, EOFError, AttributeError, ValueError) as e:  # torn or not torch's
        raise AdapterError(f"{path.name}: not a readable PyTorch file "
                           f"({str(e).splitlines()[0][:120]})",
                           hint="download or save it again") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise AdapterError(f"{path.name}: not a plain dict of tensors")
    return state


def _read_json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise AdapterError(f"{path}: missing or not JSON ({e})",
                           hint="point at a folder written by the adapters library's save_adapter"
                           ) from None
    if not isinstance(doc, dict):
        raise AdapterError(f"{path}: not a JSON object")
    return doc


def _older(version: str, than: tuple[int, int]) -> bool:
    try:
        return tuple(int(p) for p in version.split(".")[:2]) < than
    except ValueError:
        return False  # not a library version we know: assume the current arithmetic


def _library_version(doc: dict) -> str:
    return str(doc.get("version", "unknown")).removeprefix(f"{LIBRARY}.")


def _unsupported(field: str, value: Any, why: str, where: str = ADAPTER_CONFIG) -> AdapterError:
    return AdapterError(f"{where}: {field}={json.dumps(value)} cannot be reproduced: {why}",
                        hint="nothing was written")
