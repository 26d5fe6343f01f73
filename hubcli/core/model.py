"""Find the targets in a loaded encoder, swap in the wrappers, and manage named adapters.

One frozen base serves many adapters: each named adapter owns its bottleneck modules, its
LayerNorm deltas and its head; `activate(name)` routes the forward pass through them, and with
none active the encoder computes exactly what the untouched base computes. The passes that
mix adapters (rows routed to their own, a Parallel) are in `passes.py`.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator

import torch
from torch import nn

from hubcli.core.composition import Block, Fuse, Parallel, Stack, fusions_in, names_in, owner
from hubcli.core.config import PLACEMENTS, AdapterConfig
from hubcli.core.heads import HeadConfig, build_head
from hubcli.core.layer import AdapterFusion, AdapterLinear, DeltaLayerNorm
from hubcli.core.names import AdapterTable
from hubcli.core.passes import RoutedPasses
from hubcli.core.targets import targets_for
from hubcli.format.spec import EXTRA_LAYERNORMS, layernorm_sites
from hubcli.format.vocab import BASE
from hubcli.errors import AdapterError


@dataclass(frozen=True)
class AdapterInfo:
    config: AdapterConfig | Fuse  # a Fuse: a fusion's own parameters over loaded adapters
    head: HeadConfig | None


def _swap(root: nn.Module, path: str, wrap) -> nn.Module:
    parent_path, _, attr = path.rpartition(".")
    parent = root.get_submodule(parent_path) if parent_path else root
    current = getattr(parent, attr)
    if isinstance(current, (AdapterLinear, DeltaLayerNorm)):
        return current
    wrapped = wrap(current)
    setattr(parent, attr, wrapped)
    return wrapped


def _refuse_reserved(name: str) -> None:
    """Raises AdapterError: `name` is `BASE`, which routes a row to the untouched base."""
    if name == BASE:
        raise AdapterError(f"{BASE} is reserved: it routes a row to the untouched base",
                           hint="pick another name")


class AdapterModel(RoutedPasses, nn.Module):
    """A frozen encoder with adapter sites injected (every placement of the targets table, for
    every method), plus one head per adapter."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder
        for p in encoder.parameters():
            p.requires_grad_(False)
        self.base_parameter_count = sum(p.numel() for p in encoder.parameters())
        cfg = encoder.config
        self.hidden_size: int = cfg.hidden_size
        self.num_layers: int = cfg.num_hidden_layers
        t = targets_for(cfg.model_type)
        layers = encoder.get_submodule(t.layers)
        self.adapter_sites: dict[tuple[int, str], AdapterLinear] = {}
        self.layernorm_sites: dict[str, DeltaLayerNorm] = {}
        for i, layer in enumerate(layers):
            for placement, path in t.adapters.items():
                self.adapter_sites[(i, placement)] = _swap(layer, path, AdapterLinear)
            for placement in PLACEMENTS:
                norm = self.layernorm_sites[f"layers.{i}.{placement}"] = _swap(
                    layer, t.layernorms[placement], DeltaLayerNorm)
                # the output projection's parent is the sublayer that adds its input and
                # applies that LayerNorm: where a bottleneck in another form reads
                self.adapter_sites[(i, placement)].wire(
                    layer.get_submodule(t.adapters[placement].rpartition(".")[0]), norm)
        for name in EXTRA_LAYERNORMS:
            self.layernorm_sites[name] = _swap(encoder, t.extra_layernorms[name], DeltaLayerNorm)
        # one holder of the pass's route for every site: an encoder wrapped before (by
        # another model) keeps its sites' (a plain attribute, read at every site of a pass)
        self.routes = next(iter(self.adapter_sites.values())).routes
        for site in self.sites():
            site.routes = self.routes
        self.heads = AdapterTable()
        self._stacks: dict = {}  # routed heads stacked per kind, when gathering (routed_heads)
        self._routable: tuple[str, ...] | None = None  # `routable()`, until adapters change
        self.infos: dict[str, AdapterInfo] = {}
        # names for compositions of loaded adapters (a fusion or stack attached from a
        # manifest with `requires`): `activate(name)` routes through the block
        self.compositions: dict[str, Block] = {}
        # where each attached adapter came from (its manifest's SHA-256), set by whoever
        # attaches it: a component two composed adapters share is attached once
        self.sources: dict[str, str] = {}
        self.active: str | None = None
        # routed passes: True gathers (every site runs a batch's adapters at once over stacked
        # weights, a Parallel continues as one batch of its copies: fewest launches, for a GPU);
        # False runs each adapter on its own rows (least arithmetic, for a CPU); None: by the
        # device of the weights. With gradients, sites always run by segments.
        self.gather: bool | None = None

    # -- managing named adapters -------------------------------------------------------------

    def add_adapter(self, name: str, config: AdapterConfig, head: HeadConfig | None) -> None:
        """Create adapter `name` of `config`'s method, fresh (near-identity for Houlsby,
        exactly the identity for LoRA), with zero deltas on the LayerNorms it trains.

        Raises:
            AdapterError: see `require_free`.
            ValueError: a layer index out of range.
        """
        self.require_free(name)
        layers = set(config.resolved_layers(self.num_layers))
        for (i, placement), site in self.adapter_sites.items():
            if i in layers and placement in config.placement:
                site.add(name, config)
        for site in layernorm_sites(config.layernorm, self.num_layers, sorted(layers)):
            self.layernorm_sites[site].add(name)
        if head is not None:
            self.heads[name] = self._new_head(head)
        self.infos[name] = AdapterInfo(config, head)
        self._renumber()

    def add_fusion(self, block: Fuse, head: HeadConfig | None, *,
                   sites: Iterable[tuple[int, str]] | None = None,
                   train_layernorm: bool = False) -> str:
        """Create fresh AdapterFusion parameters (and a head) over loaded adapters, at `sites`
        ((layer, placement) pairs; default: every site where one of them has an adapter);
        returns the fusion's name (`block.name`), under which it is activated, trained and
        saved like an adapter. Its components stay frozen. With `train_layernorm`, the fusion
        owns LayerNorm deltas too, starting at the mean of its components' (one component's
        fusion then computes exactly what that component does); a component that reads past
        its Linear (another form) sees the LayerNorm with the fusion's deltas, as an adapter
        in a stack sees its top's.

        Raises:
            AdapterError: a component is not loaded, the fusion exists already, or a site the
                base does not have.
        """
        for n in names_in(block):
            self._require(n)
        name = block.name
        if name in self.infos:
            raise AdapterError(f"a fusion {name} is already loaded")
        components = set(names_in(block))
        wanted = (set(sites) if sites is not None else
                  {k for k, site in self.adapter_sites.items() if components & set(site.adapters)})
        if bad := sorted(wanted - set(self.adapter_sites)):
            raise AdapterError(f"the base has no adapter site at layer {bad[0][0]}, {bad[0][1]}")
        # in the model's order: a set's would draw each site's initial weights in an order
        # string hashing changes from one process to the next (--seed would not reproduce)
        for key in [k for k in self.adapter_sites if k in wanted]:
            site = self.adapter_sites[key]
            w = site.base_layer.weight
            site.fusions[name] = AdapterFusion(site.base_layer.out_features).to(
                device=w.device, dtype=w.dtype)
        if train_layernorm:
            for site in self.layernorm_sites.values():
                site.add(name)
            self.start_layernorm_at(name, components)
        if head is not None:
            self.heads[name] = self._new_head(head)
        self.infos[name] = AdapterInfo(block, head)
        return name

    def require_free(self, name: str) -> None:
        """Raises AdapterError: an adapter or composition is loaded as `name`, or it is `BASE`
        (reserved)."""
        if name in self.infos or name in self.compositions:
            raise AdapterError(f"an adapter named {name!r} is already loaded",
                               hint="remove it first or pick another name")
        _refuse_reserved(name)

    def _new_head(self, head: HeadConfig) -> nn.Module:
        """A fresh head on the base's device, in its dtype (a model made half runs halves), and
        in the model's mode: a head added to a model in eval mode must not drop out."""
        ref = self.encoder.get_input_embeddings().weight
        return build_head(self.hidden_size, head).to(device=ref.device, dtype=ref.dtype).train(
            self.training)

    def start_layernorm_at(self, name: str, components: Iterable[str], *,
                           base_where_absent: bool = False) -> None:
        """Set `name`'s LayerNorm deltas to the mean of `components`' (where they have any;
        elsewhere, with `base_where_absent`, to zero: the base's): a fusion, or an adapter
        stacked on them, then starts from the LayerNorms its frozen components were trained
        with, not from the base's."""
        for site in self.layernorm_sites.values():
            if name not in site.deltas:
                continue
            own = [site.deltas[n] for n in components if n in site.deltas]
            with torch.no_grad():
                for pname in ("weight_delta", "bias_delta"):
                    mine = getattr(site.deltas[name], pname)
                    if own:
                        mine.copy_(torch.stack([getattr(d, pname) for d in own]).mean(0))
                    elif base_where_absent:
                        mine.zero_()

    def start_from(self, name: str, source: str) -> None:
        """Set `name`'s head and LayerNorm deltas to adapter `source`'s (the base's LayerNorms
        where `source` has no deltas): a fusion over the adapter trained on its own task
        starts from what that adapter learnt, not from a random head.

        Raises:
            AdapterError: either has no head, or their heads differ in what they predict.
        """
        for n in (name, source):
            if n not in self.heads:
                raise AdapterError(f"adapter {n!r} has no head")
        if self.infos[name].head.to_manifest() != self.infos[source].head.to_manifest():
            raise AdapterError(f"the heads of {name} and {source} predict different things")
        self.heads[name].load_state_dict(self.heads[source].state_dict())
        self.start_layernorm_at(name, [source], base_where_absent=True)

    def name_composition(self, name: str, block: Block) -> None:
        """Let `activate(name)` route through `block` (a Stack or Fuse of loaded adapters, its
        fusions added): how a composed adapter is used by its own name.

        Raises:
            AdapterError: `block` is not a Stack or Fuse, a name or fusion in it is not
                loaded, or `name` is `BASE`.
        """
        if not isinstance(block, Stack | Fuse):  # a name alone would be routed as an adapter
            raise AdapterError(f"a composition is a Stack or Fuse, not {block!r}")
        _refuse_reserved(name)  # its own adapter (a stack's top) may be loaded as `name`
        self._require_block(block)
        self.compositions[name] = block
        self._renumber()

    def remove_adapter(self, name: str) -> None:
        """Remove adapter `name` (for a composed adapter: its own parameters, not its
        components).

        Raises:
            AdapterError: no such adapter.
        """
        block = self.compositions.pop(name, None)
        self.sources.pop(name, None)
        if isinstance(block, Fuse) and name not in self.infos:
            name = block.name
        self._require(name)
        renumbered = block is not None or not isinstance(self.infos[name].config, Fuse)
        for site in self.sites():
            site.remove(name)
        if name in self.heads:
            del self.heads[name]
        del self.infos[name]
        if renumbered:  # else the sites that had it forgot their stacks: none holds it
            self._renumber()
        if self.active == name:
            self.active = None

    def sites(self) -> list[AdapterLinear | DeltaLayerNorm]:
        """Every wrapped module: the adapter sites, then the LayerNorm sites."""
        return [*self.adapter_sites.values(), *self.layernorm_sites.values()]

    def _renumber(self) -> None:
        """The routable adapters changed: gathered routes number them anew (`routable`), so
        every kept stack goes (those in the old numbering no route would read again, and
        they hold a removed adapter's weights)."""
        self._routable = None
        for site in self.sites():
            site._stack.clear()
        self._stacks.clear()

    def activate(self, block: Block) -> None:
        """Route the forward pass through adapter `block` (its adapters, deltas and head), or a
        Stack or Fuse of loaded adapters (see `composition.py`), or a fusion or composition by
        its name (`add_fusion`, `name_composition`).

        Raises:
            AdapterError: a name, or a fusion, that is not loaded; a Parallel block (use
                `forward_parallel`).
        """
        if isinstance(block, Parallel):
            raise AdapterError(f"{block} yields one output per adapter and cannot be activated",
                               hint="use forward_parallel(), or AdapterHub.predict(compose=...)")
        if isinstance(block, str):  # a composition's or a fusion's name: its block
            block = self.block_of(block)
        self._require_block(block)
        for site in self.adapter_sites.values():
            site.active = block
        for site in self.layernorm_sites.values():
            site.active = owner(block)
        self.active = owner(block)

    def block_of(self, name: str) -> Block:
        """What `name` runs: the block of a composition (`name_composition`) or of a fusion
        (`add_fusion`) of that name, else the adapter `name` itself.

        Raises:
            AdapterError: nothing of that name is loaded."""
        if name in self.compositions:
            return self.compositions[name]
        self._require(name)
        config = self.infos[name].config
        return config if isinstance(config, Fuse) else name

    def deactivate(self) -> None:
        """Back to the untouched base: outputs are bit-identical to the original encoder."""
        for site in self.sites():
            site.active = None
        self.active = None

    @contextmanager
    def without_adapters(self, layers: Iterable[int]) -> Iterator[None]:
        """Within the block, the adapter modules of `layers` are skipped (their sites compute
        what the base computes) while LayerNorm deltas and heads stay: the layer ablation of
        Houlsby et al. (Fig. 6) and AdapterDrop's skipped lower layers (Rueckle et al. 2021).

        Raises:
            AdapterError: a layer the base does not have.
        """
        layers = set(layers)
        if bad := sorted(i for i in layers if not 0 <= i < self.num_layers):
            raise AdapterError(f"layer {bad[0]} does not exist: the base has layers "
                               f"0-{self.num_layers - 1}")
        sites = [site for (i, _), site in self.adapter_sites.items() if i in layers]
        for site in sites:
            site.bypass = True
        try:
            yield
        finally:
            for site in sites:
                site.bypass = False

    def adapter_names(self) -> list[str]:
        return list(self.infos)

    def _require_block(self, block: Block) -> None:
        """Raises AdapterError: an adapter of `block` not loaded, or a Fuse in it that has no
        fusion parameters (a fusion is trained, not assembled)."""
        for n in names_in(block):
            self._require(n)
        for fusion in fusions_in(block):
            if fusion.name not in self.infos:
                raise AdapterError(f"no fusion {fusion.name} is loaded", hint="train one with "
                                   f"hub fuse --adapters {','.join(names_in(fusion))} and load "
                                   "it, or add_fusion() fresh fusion layers")

    def _require(self, name: str) -> None:
        if name == BASE:  # routed to, never required: a head, a block, weights
            raise AdapterError(f"{BASE} is the untouched base, not an adapter: it has no "
                               "weights or head, and no place in a block",
                               hint="route rows to it with forward_routed, or deactivate() "
                                    "for a whole batch")
        if name not in self.infos:
            raise AdapterError(f"no adapter named {name!r} is loaded",
                               hint=f"loaded: {', '.join(self.infos) or 'none'}")

    # -- parameters and state ------------------------------------------------------------------

    def named_adapter_tensors(self, name: str) -> dict[str, torch.Tensor]:
        """Every tensor adapter `name` owns, under the names documented in `spec.py`."""
        self._require(name)
        out: dict[str, torch.Tensor] = {}
        for (i, placement), site in self.adapter_sites.items():
            if name in site.adapters:
                for pname, p in site.adapters[name].named_parameters():
                    out[f"adapters.{i}.{placement}.{pname}"] = p
        for site_name, site in self.layernorm_sites.items():
            if name in site.deltas:
                for pname, p in site.deltas[name].named_parameters():
                    out[f"layernorm.{site_name}.{pname}"] = p
        for (i, placement), site in self.adapter_sites.items():
            if name in site.fusions:
                for pname, p in site.fusions[name].named_parameters():
                    out[f"fusion.{i}.{placement}.{pname}"] = p
        if name in self.heads:
            for pname, p in self.heads[name].named_parameters():
                out[f"head.{pname}"] = p
        return out

    def trainable_parameters(self, name: str) -> list[nn.Parameter]:
        return list(self.named_adapter_tensors(name).values())

    def adapter_state_dict(self, name: str) -> dict[str, torch.Tensor]:
        """Detached, contiguous copies for saving (no base weights)."""
        return {k: v.detach().contiguous().clone() for k, v in self.named_adapter_tensors(name).items()}

    def load_adapter_state(self, name: str, tensors: dict[str, torch.Tensor]) -> None:
        """Copy saved tensors into adapter `name`; names and shapes must match exactly.

        Raises:
            AdapterError: missing, unexpected or mis-shaped tensors (all named).
        """
        own = self.named_adapter_tensors(name)
        missing, extra = sorted(set(own) - set(tensors)), sorted(set(tensors) - set(own))
        if missing or extra:
            raise AdapterError(f"adapter weights do not match its manifest: missing {missing[:3]}, "
                               f"unexpected {extra[:3]}")
        with torch.no_grad():
            for k, p in own.items():
                if tuple(p.shape) != tuple(tensors[k].shape):
                    raise AdapterError(f"tensor {k} has shape {tuple(tensors[k].shape)}, "
                                       f"expected {tuple(p.shape)}")
                p.copy_(tensors[k])

    def parameter_counts(self, name: str) -> dict[str, int]:
        """Trainable parameters of adapter `name` by group, its total, and the base's size."""
        counts = {"adapters": 0, "layernorm": 0, "head": 0}  # plus "fusion" for a fusion
        for k, v in self.named_adapter_tensors(name).items():
            group = k.split(".")[0]
            counts[group] = counts.get(group, 0) + v.numel()
        counts["trainable"] = sum(counts.values())
        counts["base"] = self.base_parameter_count
        return counts

    # -- forward (one block; routed passes and Parallel: passes.RoutedPasses) ---------------

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Last hidden states of the encoder with the active adapter (if any)."""
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        return self.encoder(**kwargs).last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of the active adapter's head.

        Raises:
            AdapterError: no adapter is active, or it has no head.
        """
        if self.active is None or self.active not in self.heads:
            raise AdapterError("no adapter with a head is active", hint="call activate(name) first")
        hidden = self.encode(input_ids, attention_mask, token_type_ids)
        return self.heads[self.active](hidden, attention_mask)


class FullFinetuneModel(nn.Module):
    """The paper's baseline: every encoder weight trained, plus a head. Not an adapter."""

    def __init__(self, encoder: nn.Module, head: HeadConfig):
        super().__init__()
        self.encoder = encoder
        self.head_config = head
        self.head = build_head(encoder.config.hidden_size, head)
        for p in encoder.parameters():
            p.requires_grad_(True)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        return self.head(self.encoder(**kwargs).last_hidden_state, attention_mask)
