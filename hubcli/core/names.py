"""A module table keyed by adapter names exactly as users spell them.

torch refuses module names with a dot ("sst2.v2", the commonest way to version a folder) and
names that shadow an attribute of the table ("train", "forward", "keys"). `AdapterTable` stores
such a name under an escaped key and speaks user names everywhere else, so adapter names need
no rules of their own. Other names are stored as they are, so `state_dict()` keys stay readable
(the hub never saves those for adapters: tensor names come from `hubcli/format/spec.py`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from torch import nn

_PREFIX = "@"  # starts every escaped key; a name starting with it is escaped too, so keys never clash
_RESERVED = frozenset(dir(nn.ModuleDict()))  # attributes a key may not shadow ("train", "_modules")
_UNESCAPE = re.compile(r"%(25|2E)")


def module_key(name: str) -> str:
    """The torch module name that stands for adapter `name` (reversible, never has a dot)."""
    if name and "." not in name and not name.startswith(_PREFIX) and name not in _RESERVED:
        return name
    return _PREFIX + name.replace("%", "%25").replace(".", "%2E")


def adapter_name(key: str) -> str:
    """The adapter name that `module_key` turned into `key`."""
    if not key.startswith(_PREFIX):
        return key
    return _UNESCAPE.sub(lambda m: "%" if m.group(1) == "25" else ".", key[len(_PREFIX):])


class AdapterTable(nn.ModuleDict):
    """An `nn.ModuleDict` whose keys, in and out, are adapter names (any non-empty string).
    Its `version` counts the changes made to it, so what is kept from its modules can tell
    in one comparison that the table is not the one it was kept from."""

    version = 0

    def __getitem__(self, name: str) -> nn.Module:
        return super().__getitem__(module_key(name))

    def __setitem__(self, name: str, module: nn.Module) -> None:
        super().__setitem__(module_key(name), module)
        self.version += 1

    def __delitem__(self, name: str) -> None:
        super().__delitem__(module_key(name))
        self.version += 1

    def clear(self) -> None:
        super().clear()
        self.version += 1

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(module_key(name))

    def __iter__(self) -> Iterator[str]:
        return (adapter_name(k) for k in super().__iter__())

    def keys(self) -> list[str]:  # type: ignore[override]
        return list(self)

    def items(self) -> list[tuple[str, nn.Module]]:  # type: ignore[override]
        return [(adapter_name(k), m) for k, m in super().items()]

    def count_of(self, keys: frozenset[str]) -> int:
        """How many modules are stored under `keys` (module keys, `module_key`): one set
        operation, for a count made at every site of every pass."""
        return len(self._modules.keys() & keys)
