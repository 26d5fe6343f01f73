"""The serving engine: one frozen base with several adapters attached, answering a batch of
requests for any mix of them (the untouched base included) in one routed forward pass.

Adapters are attached under internal slot names (`slot0`, `slot1`, ...) because the names
people use (`alice/sst2-adapter`, `./my-adapter`) may hold characters a module name cannot;
`resolve` maps what a request names to its slot.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hubcli.core.routing import BASE
from hubcli.errors import AdapterError
from hubcli.format.vocab import DEFAULT_MAX_LENGTH


class NotServed(AdapterError):
    """A request names an adapter this server does not hold."""


@dataclass
class Job:
    """One request's work: texts through one adapter (a slot name, or `BASE`)."""

    adapter: str
    texts: list[str]
    tokens: int


class BaseEmbedding:
    """What `__base__` rows decode to: the untouched base's sentence embedding, the mean of its
    last hidden states over the tokens, L2-normalised (all-MiniLM-L6-v2's own pooling)."""

    def __init__(self) -> None:
        from hubcli.tasks import get_task

        self._sentences = get_task("classification")

    def parse_input(self, line: str):
        return self._sentences.parse_input(line)

    def encode(self, examples: list, tokenizer, labels: list[str], max_length: int, *,
               with_targets: bool = False) -> list[dict]:
        return self._sentences.encode(examples, tokenizer, labels, max_length, with_targets=False)

    def collate(self, features: list[dict]) -> dict:
        return self._sentences.collate(features)

    def decode(self, hidden_per_feature: list, features: list[dict], examples: list,
               labels: list[str]) -> list[dict]:
        """{"embedding": [floats]} per example; `hidden_per_feature` holds [tokens, d] tensors."""
        import torch

        out: list[dict] = [{} for _ in examples]
        for hidden, feature in zip(hidden_per_feature, features):
            vector = torch.nn.functional.normalize(hidden.float().mean(dim=0), dim=0)
            out[feature["example_index"]] = {"embedding": vector.tolist()}
        return out


@dataclass(frozen=True)
class Served:
    """An attached adapter: its slot, the reference it was loaded from, and its manifest."""

    slot: str
    ref: str
    manifest: dict

    def describe(self) -> dict:
        return {"name": self.ref, "adapter": self.manifest["name"],
                "version": self.manifest.get("version"), "task": self.manifest["task"]}


class Engine:
    """A base and its attached adapters. `run` is called from one worker thread at a time;
    `load` may come from any thread (the lock keeps it out of a running pass)."""

    def __init__(self, base: str | None = None, *, allow_unsigned: bool = False,
                 allow_base_mismatch: bool = False,
                 notify: Callable[[str], None] = lambda _m: None) -> None:
        from hubcli.api import AdapterHub

        self.hub = AdapterHub(base, notify=notify)
        self.notify = notify
        self.attach_policy = {"allow_unsigned": allow_unsigned,
                              "allow_base_mismatch": allow_base_mismatch}
        self.served: dict[str, Served] = {}   # slot -> adapter
        self.names: dict[str, str] = {}       # every name a request may use -> slot
        self._lock = threading.Lock()
        self._base_task = BaseEmbedding()

    @classmethod
    def for_adapters(cls, refs: list[str], *, base: str | None = None, **policy) -> Engine:
        """An engine on `base` (default: the base the first adapter was trained on, else the
        packaged one) with every adapter in `refs` attached.

        Raises:
            UsageError, RegistryError (pulling), SignatureError, BundleError, ManifestError,
            BaseMismatchError, AdapterError.
        """
        from hubcli.format import manifest as manifest_io
        from hubcli.local.attach import base_for

        folders = [_folder(r, policy.get("notify")) for r in refs if r != BASE]
        if folders:
            base = base_for(manifest_io.read(folders[0]), base)
        engine = cls(base, **policy)
        for ref, folder in zip([r for r in refs if r != BASE], folders):
            engine.attach(ref, folder)
        return engine

    def load(self, ref: str) -> str:
        """Pull (a registry reference, when not pulled yet), verify and attach `ref`; its slot.

        Raises:
            as `for_adapters`.
        """
        return self.attach(ref, _folder(ref, self.notify))

    def attach(self, ref: str, folder: Path) -> str:
        """Verify and attach the adapter in `folder`, served as `ref`; its slot.

        Raises:
            AdapterError: `ref` is served already; what `AdapterHub.load` raises.
        """
        if _public(ref) in self.names:
            raise AdapterError(f"{_public(ref)!r} is served already",
                               hint="each adapter is named once")
        with self._lock:
            slot = f"slot{len(self.served)}"
            while slot in self.served:
                slot += "_"
            self.hub.load(folder, name=slot, **self.attach_policy)
            self.served[slot] = Served(slot, _public(ref), self.hub.manifests[slot])
        self.names[_public(ref)] = slot
        self.names.setdefault(ref, slot)
        return slot

    def resolve(self, name: str) -> str:
        """The slot serving `name` (`BASE` for the base).

        Raises:
            NotServed: nothing of that name is served.
        """
        if name == BASE:
            return BASE
        slot = self.names.get(name)
        if slot is None:
            raise NotServed(f"no adapter named {name!r} is served",
                               hint=f"served: {', '.join(sorted(self.listing())) or 'none'}")
        return slot

    def listing(self) -> dict[str, dict]:
        """{name: description} of every served adapter, the base included."""
        base = {BASE: {"name": BASE, "adapter": None, "version": None, "task": "embedding"}}
        return base | {s.ref: s.describe() for s in self.served.values()}

    def max_length(self, slot: str) -> int:
        if slot == BASE:
            return DEFAULT_MAX_LENGTH
        return int(self.served[slot].manifest["training"].get("max_length", DEFAULT_MAX_LENGTH))

    def count_tokens(self, slot: str, texts: list[str]) -> int:
        """Tokens `texts` take in a batch for `slot` (after truncation)."""
        limit = self.max_length(slot)
        ids = self.hub.base.tokenizer([t.partition("\t")[0] for t in texts])["input_ids"]
        return sum(min(len(i), limit) for i in ids)

    def run(self, jobs: list[Job]) -> list[list[dict]]:
        """Every job's predictions, all rows in one routed forward pass: per text what
        `hub predict --json` prints for it ({"text": ..., **prediction}).

        Raises:
            AdapterError, DataError: an input the adapter's task cannot take.
        """
        from hubcli.local.inference import run_routed

        groups, start = [], 0
        for job in jobs:
            groups.append(self._group(job, range(start, start + len(job.texts))))
            start += len(job.texts)
        with self._lock:
            flat = run_routed(self.hub.model, self.hub.base.tokenizer, groups,
                              batch_size=max(start, 1))
        out, start = [], 0
        for job in jobs:
            out.append([{"text": t, **p} for t, p in zip(job.texts, flat[start:start + len(job.texts)])])
            start += len(job.texts)
        return out

    def _group(self, job: Job, positions: range):
        from hubcli.local.inference import RowGroup
        from hubcli.tasks import get_task

        if job.adapter == BASE:
            task, labels = self._base_task, []
        else:
            manifest = self.served[job.adapter].manifest
            task, labels = get_task(manifest["task"]), list(manifest["head"]["labels"])
        return RowGroup(job.adapter, task, labels, self.max_length(job.adapter),
                        [task.parse_input(t) for t in job.texts], list(positions))


def _public(ref: str) -> str:
    """The name requests use: a registry reference without its version, else as given."""
    from hubcli.format.vocab import ADAPTER_REF

    if not Path(ref).expanduser().is_dir() and ADAPTER_REF.match(ref):
        return ref.partition("@")[0]
    return ref


def _folder(ref: str, notify: Callable[[str], None] | None) -> Path:
    from hubcli.remote.refs import resolve_adapter

    return resolve_adapter(ref, notify=notify or (lambda _m: None))
