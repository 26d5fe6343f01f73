"""The Python API: one frozen base, many named adapters.

    from hubcli.api import AdapterHub
    hub = AdapterHub()                      # the packaged all-MiniLM-L6-v2, or AdapterHub("path")
    hub.load("./sst2-adapter")              # verified (signature, digests, base hash), then attached
    hub.load("./ner-adapter", name="ner")
    hub.predict(["a gripping film"], adapter="sst2-adapter")
    hub.deactivate()                        # the untouched base again, bit for bit

Every load goes through the same verification as `hub predict`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from hubcli.format.vocab import DEFAULT_MAX_LENGTH


class AdapterHub:
    """A loaded base with any number of attached adapters, one active at a time."""

    def __init__(self, base: str | None = None, *,
                 notify: Callable[[str], None] = lambda _m: None) -> None:
        from hubcli.base.load import load_base
        from hubcli.core.model import AdapterModel

        self.base = load_base(base)
        self.model = AdapterModel(self.base.encoder)
        self.model.eval()
        self.manifests: dict[str, dict] = {}
        self.notify = notify

    def load(self, directory: str | Path, *, name: str | None = None,
             allow_unsigned: bool = False, allow_base_mismatch: bool = False) -> str:
        """Verify and attach the adapter in `directory`; returns its name and activates it.

        Raises:
            SignatureError, BundleError, ManifestError, BaseMismatchError, AdapterError.
        """
        from hubcli.local.attach import attach

        manifest = attach(self.model, self.base.info, Path(directory), name=name,
                          allow_unsigned=allow_unsigned, allow_base_mismatch=allow_base_mismatch,
                          notify=self.notify)
        name = name or manifest["name"]
        self.manifests[name] = manifest
        self.activate(name)
        return name

    def activate(self, name: str) -> None:
        self.model.activate(name)

    def deactivate(self) -> None:
        self.model.deactivate()

    def remove(self, name: str) -> None:
        self.model.remove_adapter(name)
        self.manifests.pop(name, None)

    @property
    def adapters(self) -> list[str]:
        return self.model.adapter_names()

    def predict(self, texts: list[str], *, adapter: str | None = None) -> list[dict]:
        """Predictions of `adapter` (default: the active one) for raw input lines.

        Raises:
            AdapterError: no such adapter, or none active.
        """
        from hubcli.errors import AdapterError
        from hubcli.local.inference import Predictor
        from hubcli.tasks import get_task

        name = adapter or self.model.active
        if name is None:
            raise AdapterError("no adapter is active", hint="load() one or pass adapter=NAME")
        self.activate(name)
        m = self.manifests[name]
        task = get_task(m["task"])
        predictor = Predictor(self.model, self.base.tokenizer, task, list(m["head"]["labels"]),
                              int(m["training"].get("max_length", DEFAULT_MAX_LENGTH)), m, Path("."))
        return predictor.predict([task.parse_input(t) for t in texts])
