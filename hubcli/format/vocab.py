"""One vocabulary per concept, shared by the client, the CLI and the registry.

The manifest schema is the source for every word a manifest may hold (tasks, head types,
poolings, placements, activations): the tuples below are read from it, so adding a task or an
activation is one edit to the schema plus its implementation. Words that are not manifest
fields but must agree between modules live here too.
"""

from __future__ import annotations

import json
import re

from hubcli.format.manifest import SCHEMA_DIR

_SCHEMA = json.loads((SCHEMA_DIR / "manifest.schema.json").read_text(encoding="utf-8"))
_PROPS = _SCHEMA["properties"]
# The architecture of an AdapterFusion: fusion layers over the adapters it requires, not a
# method of its own (nothing trains with it alone).
FUSION = "fusion"
# One `$defs` entry per adapter method, each with `type` fixed to the method's name.
_METHOD_DEFS = {d["properties"]["type"]["const"]: d["properties"]
                for d in _SCHEMA["$defs"].values()
                if "const" in d.get("properties", {}).get("type", {})
                and d["properties"]["type"]["const"] != FUSION}

TASKS: tuple[str, ...] = tuple(_PROPS["task"]["enum"])
HEAD_TYPES: tuple[str, ...] = tuple(_PROPS["head"]["properties"]["type"]["enum"])
POOLINGS: tuple[str, ...] = tuple(_PROPS["head"]["properties"]["pooling"]["enum"])
METHODS: tuple[str, ...] = tuple(_METHOD_DEFS)
# Where each method may sit (sublayer outputs for Houlsby, attention projections for LoRA).
METHOD_PLACEMENTS: dict[str, tuple[str, ...]] = {
    method: tuple(props["placement"]["items"]["enum"]) for method, props in _METHOD_DEFS.items()}
PLACEMENTS: tuple[str, ...] = METHOD_PLACEMENTS["houlsby"]
ACTIVATIONS: tuple[str, ...] = tuple(_METHOD_DEFS["houlsby"]["non_linearity"]["enum"])
# The sublayer tensors a bottleneck may read and add back (`reads`, `skip`), as formulas in
# h (the sublayer's output projection) and x (its input).
HOULSBY_TAPS: tuple[str, ...] = tuple(_METHOD_DEFS["houlsby"]["reads"]["enum"])
# Which LayerNorms a bottleneck adapter has deltas for (`architecture.layernorm`).
LAYERNORM_MODES: tuple[str, ...] = tuple(_METHOD_DEFS["houlsby"]["layernorm"]["enum"])
# ... in words (model cards, the registry's pages)
LAYERNORM_WORDS = {"delta": "trained as deltas on the base's",
                   "own-layers": "trained as deltas on the base's, in the adapter's layers only",
                   "frozen": "frozen"}
_TAP_FORMULAS = {"output": "h", "sum": "h + x", "normed": "LN(h + x)", "input": "x"}


def bottleneck_form(arch: dict) -> str | None:
    """What a bottleneck architecture's sublayer computes, where it is not Houlsby's own
    form: e.g. "LN(h + f(LN(h + x)) + x)" for reads normed (model cards, the registry's
    pages)."""
    reads, skip = arch.get("reads", "output"), arch.get("skip", "output")
    if reads == skip == "output":
        return None
    return f"LN({_TAP_FORMULAS[skip]} + f({_TAP_FORMULAS[reads]}) + x)"

# An adapter's version: semantic versioning, as the schema's pattern says.
VERSION = re.compile(_PROPS["version"]["pattern"])

# Tokens per example when a manifest or finetune.json does not say (and `hub train`'s default).
DEFAULT_MAX_LENGTH = 128

# The adapter name that means "no adapter": the untouched base (a row routed to it gets the base's
# own output; `hub serve` and `AdapterHub.predict` answer with its sentence embedding).
BASE = "__base__"

# A registry reference as users type it: NAMESPACE/NAME[@VERSION].
ADAPTER_REF = re.compile(
    r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<version>[\w.+-]+))?$")
