"""What `hub predict` was pointed at: a local adapter folder, a registry reference
NS/NAME[@VERSION], or nothing (the adapter pulled last)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Callable

from hubcli.errors import UsageError
from hubcli.fsutil import expanded, is_dir, spelt_as_path
from hubcli.format.vocab import ADAPTER_REF as REF, BASE


MAX_LISTED = 1000  # entries of the working folder looked at for a mistyped adapter name


def looks_like_adapter(arg: str) -> bool:
    return is_dir(arg) or bool(REF.match(arg))


def split_adapter_and_texts(args: list[str], notify: Callable[[str], None]) -> tuple[Path, list[str]]:
    """(adapter folder, texts). A registry reference is pulled first when needed.

    Raises:
        UsageError: no adapter given and none was pulled before, or a folder that is not
            there (one nearly spelt: named).
    """
    # a path spelt is the adapter, there or not (resolve_adapter says which folder is missing)
    if args and (spelt_as_path(args[0]) or looks_like_adapter(args[0])):
        ref, texts = args[0], args[1:]
    elif args and (near := near_adapter_folder(args[0])) is not None:
        raise UsageError(f"{args[0]}: no such adapter folder; did you mean {near}?",
                         hint=f"hub predict {near} TEXT...; for a one-word text, name the "
                              "adapter first")
    else:
        from hubcli.settings import load_config

        ref, texts = load_config().get("last_pulled"), args
        if not ref:
            raise UsageError("no adapter given and none pulled yet",
                             hint="hub predict ./my-adapter 'some text', or hub pull NS/NAME first")
        notify(f"using the last adapter pulled: {ref}")
    return resolve_adapter(ref, notify=notify), texts


def near_adapter_folder(word: str) -> str | None:
    """An adapter folder (one holding a manifest) whose path `word` nearly spells, as a
    mistyped one does (`sst22` or `./sst22` for `./sst2`), spelt as `word` spells its folder;
    None for a word with spaces, or none near.

    Raises nothing: a folder that cannot be listed has none near."""
    import difflib

    from hubcli.format.manifest import MANIFEST

    if not word or any(c.isspace() for c in word) or len(word) > 200:
        return None
    typed = Path(word.rstrip("/"))
    where = expanded(typed.parent) if typed.parent != Path(".") else Path.cwd()
    try:
        here = [p.name for p in itertools.islice(where.iterdir(), MAX_LISTED)
                if (p / MANIFEST).is_file()]
    except OSError:
        return None
    near = difflib.get_close_matches(typed.name, here, n=1, cutoff=0.8)
    if not near:
        return None
    return f"./{near[0]}" if typed.parent == Path(".") else str(typed.parent / near[0])


def resolve_adapter(ref: str, notify: Callable[[str], None]) -> Path:
    """The folder of a local adapter, or of a registry reference (pulled first when needed).

    Raises:
        UsageError: a path-like reference that is not a folder, a name that is neither a
            folder nor NAMESPACE/NAME[@VERSION], or `BASE`.
    """
    if ref == BASE:
        raise UsageError(f"{BASE} (the untouched base) routes rows in Python, it is not an "
                         "adapter to load", hint="AdapterHub.predict(texts, adapter=[...]) takes "
                         f"{BASE} rows; hub predict takes adapter folders or NS/NAME")
    if is_dir(ref):
        return expanded(ref)
    if spelt_as_path(ref):
        near = near_adapter_folder(ref)
        raise UsageError(f"{ref}: no such adapter folder",
                         hint=f"did you mean {near}?" if near else "point at a folder written "
                              "by `hub train --out`, or NS/NAME")
    if not REF.match(ref):
        near = near_adapter_folder(ref)
        raise UsageError(f"{ref}: no such adapter folder, nor a registry reference",
                         hint=f"did you mean {near}?" if near else "point at a folder "
                              "written by `hub train --out`, or NAMESPACE/NAME[@VERSION]")
    from hubcli.remote.pull import ensure_pulled

    return ensure_pulled(ref, notify=notify)
