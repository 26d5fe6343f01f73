"""One error hierarchy for the whole client.

Every exception carries the data a user needs to act (file, line, value, repo id, hashes) and a
`hint` with the fix. The CLI maps these to a one-line message plus the hint; `HUB_DEBUG=1` shows
the traceback instead.
"""

from __future__ import annotations


class HubError(Exception):
    """Base of every error the hub raises on purpose."""

    hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint


class UsageError(HubError):
    """A bad option or combination of options."""


class OptionError(UsageError):
    """One option's value is unusable: the message names the option, the value and the rule."""

    def __init__(self, option: str, value: object, problem: str, *, hint: str | None = None) -> None:
        spelt = option if value is True else f"{option} {value}"  # a flag given: no value
        super().__init__(f"{spelt}: {problem}", hint=hint)
        self.option = option
        self.value = value


class DataError(HubError):
    """Bad training or evaluation data: carries the file and, where known, the line."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 hint: str | None = None) -> None:
        where = path if line is None else f"{path}:{line}"
        super().__init__(f"{where}: {message}" if where else message, hint=hint)
        self.path = path
        self.line = line


class ModelError(HubError):
    """The base model cannot be loaded or is not supported."""


class UnsupportedModelError(ModelError):
    """The base model's type has no adapter targets in the data table."""

    def __init__(self, model_type: str, supported: list[str]) -> None:
        super().__init__(
            f"model type {model_type!r} is not supported for Houlsby adapters",
            hint=f"supported model types: {', '.join(sorted(supported))}",
        )
        self.model_type = model_type


class AdapterError(HubError):
    """An adapter directory, its manifest or its weights are unusable."""


class ManifestError(AdapterError):
    """manifest.json is missing, not JSON, or not valid against the schema."""

    def __init__(self, message: str, *, path: str | None = None, pointer: str | None = None,
                 hint: str | None = None) -> None:
        loc = f"{path}" + (f" at {pointer}" if pointer else "") if path else None
        super().__init__(f"{loc}: {message}" if loc else message, hint=hint)
        self.path = path
        self.pointer = pointer


class BaseMismatchError(AdapterError):
    """The adapter was trained on a base model whose content hash differs from the loaded one
    (or, with `component`, a composed adapter's component was trained on another base than
    the composed adapter)."""

    def __init__(self, *, expected: str, actual: str, expected_name: str,
                 component: str | None = None) -> None:
        if component is None:
            message = (f"adapter was trained on base {expected_name!r} with content hash "
                       f"{expected}, but the loaded base has content hash {actual}")
            hint = (f"load the base {expected_name!r} it was trained on, "
                    "or pass --allow-base-mismatch to attach anyway (outputs will be wrong)")
        else:
            message = (f"component {component} was trained on a base with content hash "
                       f"{actual}, but the adapter that requires it on base {expected_name!r} "
                       f"({expected})")
            hint = "all components of a fusion or stack must share its base; nothing was loaded"
        super().__init__(message, hint=hint)
        self.expected = expected
        self.actual = actual
        self.expected_name = expected_name
        self.component = component


class ComponentError(AdapterError):
    """A component a composed adapter requires (its `requires` list) cannot be used: not found,
    or not the exact one it was composed with (its manifest digest differs)."""

    def __init__(self, message: str, *, component: str, hint: str | None = None) -> None:
        super().__init__(f"component {component}: {message}", hint=hint)
        self.component = component


class ComponentNameTaken(ComponentError):
    """Another version of a component is attached under its name (`component`): a model holds
    one adapter per name."""

    def __init__(self, component: str, version: str) -> None:
        super().__init__("another adapter of this name is attached already",
                         component=component,
                         hint=f"remove it first: a composed adapter needs its own {component} "
                              f"{version}")


class BundleError(AdapterError):
    """A directory is not a publishable bundle (extra, missing or malformed files)."""

    def __init__(self, message: str, *, path: str | None = None, hint: str | None = None) -> None:
        super().__init__(f"{path}: {message}" if path else message, hint=hint)
        self.path = path


class SignatureError(HubError):
    """A signature is missing, invalid, or made by an untrusted key."""


class NoSignatureError(SignatureError):
    """The bundle has no signature file."""


class UntrustedSignerError(SignatureError):
    """The signature was made by a key that is not trusted."""


class InvalidSignatureError(SignatureError):
    """The signature file is malformed or its cryptographic signature does not verify."""


class TamperedError(SignatureError):
    """The files differ from what was signed: modified, added, missing or renamed."""

    def __init__(self, message: str, *, file: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.file = file


class SigningKeyError(HubError):
    """A signing key is missing, unreadable or has a wrong passphrase."""


class RegistryError(HubError):
    """The registry (ours or the Hugging Face Hub) refused or failed a request."""

    def __init__(self, message: str, *, repo_id: str | None = None, revision: str | None = None,
                 status: int | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.repo_id = repo_id
        self.revision = revision
        self.status = status


class AuthError(RegistryError):
    """No token, or the token was refused."""


class NotFoundError(RegistryError):
    """The repository, revision or file does not exist (or is private)."""


class ConflictError(RegistryError):
    """The version exists already with other content."""


class BackupError(HubError):
    """A registry backup cannot be written, or an archive cannot be restored (damaged, from
    another schema revision, or aimed at a deployment that holds data)."""

    def __init__(self, message: str, *, path: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path = path
