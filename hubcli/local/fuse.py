"""Training over frozen components: `hub fuse` (AdapterFusion, Pfeiffer et al. 2021, stage
two: fusion layers and a head over frozen task adapters) and `hub train --stack` (MAD-X,
Pfeiffer et al. 2020: a task adapter trained on the output of a frozen language adapter).

The components are verified and pinned (`compose.pin`) before the base loads; the adapter
written names them in its manifest's `requires`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from hubcli.errors import BaseMismatchError, ComponentError, OptionError
from hubcli.format.spec import layernorm_sites
from hubcli.format.vocab import FUSION
from hubcli.local.compose import label, pin

if TYPE_CHECKING:
    from hubcli.core.heads import HeadConfig
    from hubcli.core.model import AdapterModel
    from hubcli.signing.policy import VerifiedBundle

FUSE, STACK = "fuse", "stack"
# Pfeiffer et al. 2021, section 4.2: AdapterFusion trains at learning rate 5e-5 for 10 epochs
# (batch 32, as `hub train`); the value matrix starts as the identity (`core.layer`).
FUSION_LR, FUSION_EPOCHS = 5e-5, 10


@dataclass(frozen=True)
class Component:
    bundle: VerifiedBundle
    requirement: dict[str, Any]  # its `requires` entry


def check_components(refs: tuple[str, ...], compose: str | None) -> None:
    """Refuse a component list no run could use, before anything loads.

    Raises:
        OptionError: a fusion of fewer than two adapters, or one named twice.
    """
    if compose == FUSE and len(refs) < 2:
        raise OptionError("--adapters", ",".join(refs) or "''", "a fusion needs two adapters "
                          "or more", hint="e.g. --adapters alice/sst2@0.1.0,./mrpc-adapter")
    if dup := next((r for r in refs if refs.count(r) > 1), None):
        raise OptionError("--adapters", dup, "is named twice", hint="name each adapter once")


def load_components(refs: tuple[str, ...], out: Path, *, allow_unsigned: bool,
                    notify: Callable[[str], None]) -> list[Component]:
    """The adapters `hub fuse --adapters` or `hub train --stack` names (folders or registry
    references, pulled when needed), verified, each with its `requires` entry: its registry
    reference when it has one (given, or the folder was pulled), else its folder relative to
    `out`.

    Raises:
        OptionError: `out` is a component's folder, or inside one.
        ComponentError: two components of one name.
        BaseMismatchError: components trained on different bases (named).
        SignatureError, BundleError, ManifestError, RegistryError, UsageError: see
            `verify_adapter` and `resolve_adapter`.
    """
    from hubcli.format.vocab import ADAPTER_REF
    from hubcli.local.attach import verify_adapter
    from hubcli.remote import pull_records
    from hubcli.remote.refs import resolve_adapter

    out_dir = Path(out).resolve()
    loaded = []
    for ref in refs:
        folder = resolve_adapter(ref, notify=notify).resolve()
        if folder == out_dir or folder in out_dir.parents:
            raise OptionError("--out", out, f"is {'' if folder == out_dir else 'inside '}the "
                              f"folder of the component {ref}: writing there replaces or "
                              "breaks what it is composed of",
                              hint="write it to a folder of its own")
        bundle = verify_adapter(folder, allow_unsigned=allow_unsigned, notify=notify)
        pulled = next((r for r in pull_records.load() if r.path == str(folder)), None)
        if pulled is not None:
            where = {"ref": pulled.repo_id}
        elif Path(ref).expanduser().is_dir():
            where = {"path": os.path.relpath(folder, out_dir)}
        else:
            where = {"ref": ADAPTER_REF.match(ref)["repo"]}
        loaded.append(Component(bundle, pin(bundle, **where)))
    names = [c.bundle.manifest["name"] for c in loaded]
    if dup := next((n for n in names if names.count(n) > 1), None):
        raise ComponentError("two components have this name", component=dup,
                             hint="each component is attached under its manifest's name")
    first = loaded[0].bundle.manifest["base_model"]
    for c in loaded[1:]:
        theirs = c.bundle.manifest["base_model"]["content_hash"]
        if theirs != first["content_hash"]:
            raise BaseMismatchError(expected=first["content_hash"], actual=theirs,
                                    expected_name=first["name"], component=label(c.requirement))
    return loaded


def build(model, base_info, components: list[Component], compose: str, name: str, head,
          config, notify: Callable[[str], None]) -> tuple[str, dict[str, Any] | None]:
    """Attach the frozen components to `model`, add what is trained (a fusion over them with
    its head, or adapter `name` of `config` stacked on them) and activate the composition.
    A fusion starts from the head and LayerNorm deltas of the one component whose head
    predicts the same labels (`same_head`), when exactly one does.
    Returns (the name its tensors are under, the fusion's architecture; None for a stack).

    Raises:
        BaseMismatchError: a component's base is not the loaded one; before its weights load.
        OptionError: a stacked adapter without LayerNorm deltas on components with them.
    """
    from hubcli.core.composition import Fuse, Stack, names_in
    from hubcli.local.attach import attach

    blocks = []
    for c in components:
        attach(model, base_info, c.bundle, notify=notify)
        blocks.append(model.compositions.get(c.bundle.manifest["name"],
                                             c.bundle.manifest["name"]))
    if compose == STACK:
        below = names_in(Stack(*blocks))
        mine = set(layernorm_sites(config.layernorm, model.num_layers,
                                   config.resolved_layers(model.num_layers)))
        if any(n in site.deltas for s, site in model.layernorm_sites.items() if s not in mine
               for n in below):
            # the stack runs with the top adapter's LayerNorms: where it has no deltas, the
            # adapters below would run under the base's, not the ones they learnt with
            option, value, hint = (("--method", config.method, "stack a Houlsby adapter on it")
                                   if config.method == "lora" else
                                   ("--layernorm", config.layernorm, "use --layernorm delta"))
            raise OptionError(option, value, f"{', '.join(below)} trained LayerNorm deltas "
                              "where this adapter has none, and a stack runs with its top "
                              "adapter's", hint=hint)
        model.add_adapter(name, config, head)
        # start them at the ones the frozen adapters below were trained with, or those
        # adapters start out of their element
        model.start_layernorm_at(name, below)
        model.activate(Stack(*blocks, name))
        return name, None
    block = Fuse(*blocks)
    own = model.add_fusion(block, head, train_layernorm=True)
    sites = sorted(k for k, site in model.adapter_sites.items() if own in site.fusions)
    layers, placement = sorted({i for i, _ in sites}), sorted({p for _, p in sites})
    if len(sites) != len(layers) * len(placement):
        # the manifest records layers x placements: fill the grid (a fusion at a site
        # without component adapters mixes copies of the sublayer output: a learned V y)
        model.remove_adapter(own)
        own = model.add_fusion(block, head, train_layernorm=True,
                               sites=[(i, p) for i in layers for p in placement])
    matching = same_head(model, components, head)
    if len(matching) == 1:
        # start from the head and LayerNorms of the adapter trained for these labels (the
        # paper's setting: the target task's adapter is one of those fused): the fusion then
        # refines its solution instead of re-learning a random head over the components'
        # mean LayerNorms (README: 0.7940 vs 0.7825 test Pearson on STS-B)
        (twin, source), = matching
        model.start_from(own, source)
        notify(f"the fusion starts from {twin}'s head and LayerNorms (its head predicts the "
               "same labels)")
    elif matching:  # nothing tells which of them was trained on this task
        notify(f"the fusion starts with a new head: {', '.join(n for n, _ in matching)} all "
               "predict the same labels, so none is taken as the adapter trained on this task")
    model.activate(block)
    return own, {"type": FUSION, "placement": placement, "layers": layers, "layernorm": "delta"}


def same_head(model: AdapterModel, components: list[Component],
              head: HeadConfig | None) -> list[tuple[str, str]]:
    """(component name, the adapter whose head it predicts with) for each component whose
    head predicts what `head` does (type, labels, pooling); a composed component (a fusion,
    a stack) predicts with its owner's."""
    from hubcli.core.composition import owner

    if head is None:
        return []
    matching = []
    for c in components:
        name = c.bundle.manifest["name"]
        source = owner(model.compositions.get(name, name))
        theirs = model.infos[source].head
        if theirs is not None and theirs.to_manifest() == head.to_manifest():
            matching.append((name, source))
    return matching
