"""The Python API: one frozen base, many named adapters.

    from hubcli.api import AdapterHub
    hub = AdapterHub()                      # the packaged all-MiniLM-L6-v2, or AdapterHub("path")
    hub.load("./sst2-adapter")              # verified (signature, digests, base hash), then attached
    hub.load("./ner-adapter", name="ner")
    hub.predict(["a gripping film"], adapter="sst2-adapter")
    hub.predict(["a gripping film", "Angela visited Paris"], adapter=["sst2-adapter", "ner"])
    hub.predict(["Angela loved Paris"], compose=Parallel("sst2-adapter", "ner"))
    hub.deactivate()                        # the untouched base again, bit for bit

A list of adapters (one per text) runs in one routed pass per batch: each row through its own
adapter, however many are mixed, composed ones (a fusion, a stack) included. `Parallel` runs
the layers below all of its adapters once and each adapter from there
(`AdapterModel.forward_parallel`). Every load goes through the same verification as
`hub predict`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from hubcli.format.manifest import MANIFEST
from hubcli.format.vocab import BASE, DEFAULT_MAX_LENGTH
from hubcli.core.composition import (Fuse, Parallel, Stack, matching, names_in, owner,
                                     spelt_out)

if TYPE_CHECKING:
    from hubcli.local.inference import RowGroup
    from hubcli.tasks.base import Task
    from hubcli.signing.policy import VerifiedBundle


class AdapterHub:
    """A loaded base with any number of attached adapters, one active at a time."""

    def __init__(self, base: str | None = None, *, device: str = "cpu",
                 notify: Callable[[str], None] = lambda _m: None,
                 warn_inputs: bool = True) -> None:
        """The base (`base`: a local folder, a Hub id, or None for the packaged default) on
        `device` (cpu, cuda, cuda:N, mps or auto). On a GPU, mixed batches and Parallel
        gather their adapters (`AdapterModel.gather`). `notify` hears notices about the
        adapters (an unsigned one, a base that differs) and, with `warn_inputs`, warnings
        about the texts (one cut short); a server turns those off: its texts are its
        clients', and its log is not theirs.

        Raises:
            OptionError: `device` is unknown or not on this machine (before anything loads).
            ModelError: the base cannot be loaded.
        """
        from hubcli.base.load import load_base
        from hubcli.core.model import AdapterModel
        from hubcli.local.device import resolve

        where = resolve(device)
        self.base = load_base(base)
        self.model = AdapterModel(self.base.encoder)
        self.model.to(where)  # adapters and heads added later are made beside the base
        self.model.eval()
        self.manifests: dict[str, dict] = {}  # every adapter usable by name, components too
        self.components: dict[str, tuple[str, ...]] = {}  # a composed adapter's, by name
        self._added: set[str] = set()  # loaded by `add` (not only as a component)
        self.active: str | None = None
        self.notify = notify
        self.warn_inputs = warn_inputs

    def load(self, directory: str | Path, *, name: str | None = None,
             allow_unsigned: bool = False, allow_base_mismatch: bool = False) -> str:
        """Verify and attach the adapter in `directory`; returns its name and activates it.

        Raises:
            SignatureError, BundleError, ManifestError, BaseMismatchError, AdapterError.
        """
        from hubcli.local.attach import verify_adapter

        bundle = verify_adapter(Path(directory), allow_unsigned=allow_unsigned,
                                notify=self.notify)
        return self.add(bundle, name=name, allow_base_mismatch=allow_base_mismatch)

    def add(self, bundle: VerifiedBundle, *, name: str | None = None,
            allow_base_mismatch: bool = False) -> str:
        """Attach an adapter verified already (`hubcli.local.attach.verify_adapter`); returns
        its name and activates it.

        Raises:
            BaseMismatchError, AdapterError.
        """
        from hubcli.local.attach import attach

        name = name or bundle.manifest["name"]
        if self.model.sources.get(name) != bundle.digests[MANIFEST]:
            # else attached already, as a component of one loaded before: shared
            attach(self.model, self.base.info, bundle, name=name,
                   allow_base_mismatch=allow_base_mismatch, notify=self.notify)
        self._record(bundle, name)
        self._added.add(name)
        self.activate(name)
        return name

    def _record(self, bundle: VerifiedBundle, name: str) -> None:
        """`bundle`'s manifest under `name`, its components' under theirs: each is attached
        by `attach`, and usable by name."""
        for component in bundle.components:
            self._record(component, component.manifest["name"])
        self.manifests[name] = bundle.manifest
        if bundle.components:
            self.components[name] = tuple(c.manifest["name"] for c in bundle.components)

    def activate(self, name: str) -> None:
        """Predict with adapter `name` (a composed one too) when `predict` names none.

        Raises:
            AdapterError: no such adapter."""
        self._manifest(name)
        self.model.activate(name)
        self.active = name

    def deactivate(self) -> None:
        self.model.deactivate()
        self.active = None

    def remove(self, name: str) -> None:
        """Detach adapter `name`; a composed one's components go with it unless loaded on
        their own or used by another composed adapter loaded.

        Raises:
            AdapterError: no such adapter, or a component of a composed adapter loaded
                (shared when loaded on its own too): remove that first."""
        self._manifest(name)  # the names people loaded, not the model's own
        users = self._users(name)
        if users:
            from hubcli.errors import AdapterError

            outermost = users[0]  # what can be removed first: a stack on a fusion, not it
            while self._users(outermost):
                outermost = self._users(outermost)[0]
            raise AdapterError(f"{name} is a component of {users[0]}, loaded too",
                               hint=f"remove {outermost} first")
        self.model.remove_adapter(name)
        self.manifests.pop(name, None)
        self._added.discard(name)
        if self.active == name:
            self.active = None
        for component in dict.fromkeys(self.components.pop(name, ())):
            if component in self.manifests and component not in self._added and not any(
                    component in used for used in self.components.values()):
                self.remove(component)  # nothing loaded needs it (one removed already, as
                # a component of another of its components, is gone)

    def _users(self, name: str) -> list[str]:
        """The composed adapters loaded with `name` among their components."""
        return [n for n, used in self.components.items() if name in used]

    def holds(self, name: str) -> list[str]:
        """The names whose tensors adapter `name` holds in memory: its own (a fusion's under
        its block's name), then its components', each once.

        Raises:
            AdapterError: no such adapter."""
        self._manifest(name)
        blocks = self.model.compositions
        return list(dict.fromkeys(blocks[n].name if isinstance(blocks.get(n), Fuse) else n
                                  for n in (name, *self.requires(name))))

    def requires(self, name: str) -> list[str]:
        """The components adapter `name` attaches as well, at any depth, each once, by the names
        they are loaded as (empty for a single adapter)."""
        out: list[str] = []
        for component in self.components.get(name, ()):
            out += [n for n in (component, *self.requires(component)) if n not in out]
        return out

    @property
    def adapters(self) -> list[str]:
        """The adapters `predict` takes by name: each loaded, and its components."""
        return list(self.manifests)

    def predict(self, texts: list[str], *, adapter: str | list[str] | None = None,
                compose: Parallel | Stack | Fuse | None = None) -> list[dict]:
        """Predictions for raw input lines: of `adapter` (default: the active one); with a list,
        text i through adapter[i]; with `compose=Parallel(...)`, {adapter: prediction} for
        every text; with `compose=Stack(...)` or `Fuse(...)`, the block (its owner's head).

        Raises:
            TypeError: `texts` is one string, not a list of them, or holds something else;
                `adapter` is neither a name nor a list of names.
            UsageError: a text is blank (nothing to predict from), or holds a lone
                surrogate (no character: nothing can tokenize it).
            AdapterError: no such adapter, none active, the list's length differs from the
                texts', both `adapter` and `compose` given, or `compose` is not a block.
        """
        from hubcli.errors import AdapterError

        texts = _checked(texts)
        if adapter is not None and compose is not None:
            raise AdapterError("adapter= and compose= both given",
                               hint="pass one: adapter= for the texts' adapters, compose= for "
                                    "a block every text goes through")
        if compose is not None and not isinstance(compose, Parallel | Stack | Fuse):
            raise AdapterError(f"compose= takes a Parallel, Stack or Fuse, not {compose!r}",
                               hint="e.g. compose=Parallel(\"sst2\", \"ner\"); for one "
                                    "adapter per text, adapter=[...]")
        if isinstance(compose, Parallel):
            return self._parallel(texts, compose)
        if isinstance(adapter, list | tuple):
            if len(adapter) != len(texts):
                raise AdapterError(f"{len(adapter)} adapters for {len(texts)} texts",
                                   hint="pass one adapter name per text")
            for number, name in enumerate(adapter, 1):
                if not isinstance(name, str):
                    raise TypeError(f"adapter {number} is a {type(name).__name__}, not an "
                                    "adapter's name")
            return self._each(texts, list(adapter))
        if adapter is not None and not isinstance(adapter, str):
            raise TypeError(f"adapter= takes a name, or a list of one per text, not a "
                            f"{type(adapter).__name__}")
        if compose is not None:
            return self._through(texts, *self._loaded(compose))
        name = self.active if adapter is None else adapter
        if name is None:
            raise AdapterError("no adapter is active", hint="load() one or pass adapter=NAME")
        if name == BASE:
            return self._each(texts, [BASE] * len(texts))
        return self._through(texts, name, name)

    def _loaded(self, block: Stack | Fuse) -> tuple[str, Stack | Fuse]:
        """(the name whose manifest and head `block` predicts with, the block to run): the
        composed adapter loaded as it (a fusion's parameters are under its own name, which
        `Fuse(a, b)` does not spell), else its owner and the block, in which the name of a
        composed adapter loaded stands for its block, as in `adapter=`
        (`composition.spelt_out`: `Stack("top")`, for an adapter trained with `hub train
        --stack sst --name top`, runs sst, then top; `Stack("sst", "top")` is that adapter).

        Raises:
            AdapterError: a name in `block` that is not loaded, or a block in it spelt as
                several loaded fusions."""
        from hubcli.errors import AdapterError

        for name in names_in(block):
            self._manifest(name)
        compositions = {n: b for n, b in self.model.compositions.items() if n in self.manifests}
        found = matching(block, compositions)
        if len(found) > 1:
            raise AdapterError(f"{block} is {' and '.join(n for n, _ in found)}",
                               hint="pass adapter=NAME for the one you mean")
        if found:
            return found[0]
        try:
            block = spelt_out(block, compositions)
        except ValueError as err:
            raise AdapterError(str(err), hint="name the one you mean: Fuse(..., name=NAME)"
                               ) from None
        head = owner(block)  # a fusion's is its parameters' name: find the name it is loaded as
        return next((n for n, b in compositions.items()
                     if isinstance(b, Fuse) and b.name == head), head), block

    def _through(self, texts: list[str], name: str, block) -> list[dict]:
        """Every text through `block`, activated, predicting with adapter `name`'s head."""
        from hubcli.local.inference import Predictor

        m = self._manifest(name)
        self.model.activate(block)
        task = self._task(m, warn=True)
        predictor = Predictor(self.model, self.base.tokenizer, task, list(m["head"]["labels"]),
                              int(m["training"].get("max_length", DEFAULT_MAX_LENGTH)), m,
                              Path("."))
        return predictor.predict([task.parse_input(t) for t in texts])

    def _each(self, texts: list[str], adapters: list[str]) -> list[dict]:
        """Text i through adapters[i], in one routed pass per batch."""
        from hubcli.local.inference import run_routed

        rows: dict[str, list[int]] = {}
        for i, n in enumerate(adapters):
            rows.setdefault(n, []).append(i)
        groups, start = [], 0
        for n, pos in rows.items():  # numbered from 0 in this order: run_routed's positions
            groups.append(self._group(n, [texts[i] for i in pos], range(start, start + len(pos)),
                                      numbers=[i + 1 for i in pos]))
            start += len(pos)
        results: list = [None] * len(texts)
        order = [i for pos in rows.values() for i in pos]
        for i, pred in zip(order, run_routed(self.model, self.base.tokenizer, groups)):
            results[i] = pred
        return results

    def _parallel(self, texts: list[str], block: Parallel) -> list[dict]:
        """{adapter: prediction} for every text, all the adapters as one Parallel (a lone one:
        routed)."""
        from hubcli.local.inference import run_parallel

        names = list(dict.fromkeys(block.children))
        if len(names) == 1:
            return [{names[0]: p} for p in self._each(texts, names * len(texts))]
        # the same texts for each: the first warns of one cut short, once
        groups = [self._group(n, texts, range(j * len(texts), (j + 1) * len(texts)),
                              warn=j == 0) for j, n in enumerate(names)]
        flat = run_parallel(self.model, self.base.tokenizer, groups)
        return [{n: flat[j * len(texts) + i] for j, n in enumerate(names)}
                for i in range(len(texts))]

    def count_tokens(self, texts: list[str], *, adapter: str) -> int:
        """The tokens a pass runs for `texts` through `adapter` (`BASE` too): both texts of a
        pair, a context's every window, after each is cut to the adapter's `max_length`.

        Raises:
            TypeError, UsageError: as `predict` raises them for `texts`, or a text the
                adapter's task cannot take.
            AdapterError: no such adapter.
        """
        texts = _checked(texts)
        group = self._group(adapter, texts, range(len(texts)), warn=False)
        features = group.task.encode(group.examples, self.base.tokenizer, group.labels,
                                     group.max_length, with_targets=False)
        return sum(len(f["input_ids"]) for f in features)

    def _manifest(self, name: str) -> dict:
        if name not in self.manifests:
            from hubcli.errors import AdapterError

            if name == BASE:
                raise AdapterError(f"{BASE} is the untouched base, not an adapter",
                                   hint=f"adapter=\"{BASE}\" predicts with it (for some "
                                        "texts: in adapter=[...]); deactivate() leaves no "
                                        "adapter active")
            raise AdapterError(f"no adapter named {name!r} is loaded",
                               hint=f"loaded: {', '.join(self.manifests) or 'none'}")
        return self.manifests[name]

    def _task(self, manifest: dict, *, warn: bool, numbers: list[int] | None = None) -> Task:
        """`manifest`'s task; `warn`: it warns through `notify` of a text it cuts short
        (where the hub `warn_inputs`), calling the texts by `numbers` (`Task.numbers`)."""
        from hubcli.tasks import get_task

        task = get_task(manifest["task"], manifest.get("head"))
        if warn and self.warn_inputs:
            task.notify = self.notify
        task.numbers = numbers
        return task

    def _group(self, name: str, texts: list[str], positions, *, warn: bool = True,
               numbers: list[int] | None = None) -> RowGroup:
        """`texts` through adapter `name`, their predictions at `positions` of `run_routed`'s;
        `numbers`: what warnings and errors call them (`Task.numbers`), by default 1, 2, ...

        Raises:
            AdapterError: no such adapter.
            UsageError: a text the adapter's task cannot take."""
        from hubcli.local.inference import RowGroup

        if name == BASE:  # the base's sentence embedding: text in, no head
            task = self._task({"task": "classification"}, warn=warn, numbers=numbers)
            return RowGroup(name, task, [], DEFAULT_MAX_LENGTH, [task.parse_input(t) for t in texts],
                            list(positions))
        m = self._manifest(name)
        task = self._task(m, warn=warn, numbers=numbers)
        examples = [task.parse_input(t) for t in texts]
        # the manifest's name, not a server's slot name
        task.check_inputs(examples, m["training"].get("text_pairs"), m.get("name", name))
        return RowGroup(name, task, list(m["head"]["labels"]),
                        int(m["training"].get("max_length", DEFAULT_MAX_LENGTH)), examples,
                        list(positions))


def _checked(texts: list[str]) -> list[str]:
    """`texts` as a list, each a text something can be predicted from.

    Raises:
        TypeError: `texts` is one string, not a list of them, or holds something else.
        UsageError: a text is blank, or holds a lone surrogate (no character: nothing can
            tokenize it).
    """
    from hubcli.errors import UsageError

    if isinstance(texts, str):
        raise TypeError("texts is one string: pass a list of texts ([text] for one)")
    texts = list(texts)  # a generator is read once
    for number, text in enumerate(texts, 1):
        if not isinstance(text, str):
            raise TypeError(f"text {number} is a {type(text).__name__}, not a string")
        if not text.strip():
            raise UsageError(f"text {number} is blank", hint="give each text some words")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise UsageError(f"text {number} holds {text[err.start]!r} at character "
                             f"{err.start + 1}: half of a UTF-16 pair, not a character",
                             hint="send the text as valid UTF-8 (or \\u escapes of whole "
                                  "pairs)") from None
    return texts


def predict_each(folders: list[Path], texts: list[str], *, base: str | None = None,
                 device: str = "cpu", allow_unsigned: bool = False,
                 allow_base_mismatch: bool = False,
                 notify: Callable[[str], None] = lambda _m: None
                 ) -> tuple[AdapterHub, list[str], list[dict]]:
    """Every text through every adapter in `folders`, the Parallel of them all (the layers
    below every adapter run once): (the hub, adapter names, {name: prediction} per text).
    The base is `base`, else the one the first adapter was trained on, on `device`.

    Raises:
        SignatureError, BundleError, ManifestError, BaseMismatchError, AdapterError (also a
        folder given twice, or two adapters of one name), OptionError (`device`).
    """
    from hubcli.errors import AdapterError
    from hubcli.local.attach import base_for, verify_adapter
    from hubcli.local.device import resolve

    device = resolve(device)  # a device this machine lacks: refused before anything is read
    # every adapter is verified before the base loads, and only once
    _refuse_a_folder_twice(folders)
    bundles = [verify_adapter(Path(f), allow_unsigned=allow_unsigned, notify=notify)
               for f in folders]
    seen: dict[str, Path] = {}
    for folder, bundle in zip(folders, bundles):
        if (name := bundle.manifest["name"]) in seen:
            raise AdapterError(f"{seen[name]} and {folder} are both adapter {name!r}",
                               hint="an adapter's name is in its manifest (hub train "
                                    "--name sets it): train one again under another name")
        seen[name] = Path(folder)
    hub = AdapterHub(base_for(bundles[0].manifest, base), device=device, notify=notify)
    names = [hub.add(b, allow_base_mismatch=allow_base_mismatch) for b in bundles]
    preds = hub.predict(texts, compose=Parallel(*names)) if len(names) > 1 else [
        {names[0]: p} for p in hub.predict(texts, adapter=names[0])]
    return hub, names, preds


def _refuse_a_folder_twice(folders: list[Path]) -> None:
    """Raises AdapterError where one of `folders` is given twice, under any spelling of its
    path."""
    from hubcli.errors import AdapterError

    seen: set[Path] = set()
    for folder in folders:
        if (real := Path(folder).resolve()) in seen:
            raise AdapterError(f"{folder} is given twice", hint="give each adapter once")
        seen.add(real)


def load_onnx_predictor(path: str | Path, *, base: str | None = None,
                        allow_unsigned: bool = False, allow_base_mismatch: bool = False,
                        notify: Callable[[str], None] = lambda _m: None):
    """An onnxruntime predictor (`.predict(examples)`, `.logits(batch)`) for an ONNX graph
    written by `hub export --format onnx`, or for an adapter folder (verified, exported once
    and cached):

        p = load_onnx_predictor("./sst2-adapter")
        p.predict([p.task.parse_input("a fine film")])

    Raises:
        SignatureError, BundleError, ManifestError, BaseMismatchError, AdapterError, ModelError.
    """
    from hubcli.interop.onnx_runtime import load_onnx, load_onnx_for_adapter

    if Path(path).is_dir():
        return load_onnx_for_adapter(Path(path), base=base, allow_unsigned=allow_unsigned,
                                     allow_base_mismatch=allow_base_mismatch, notify=notify)
    return load_onnx(Path(path), base=base)
