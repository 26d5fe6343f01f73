"""`hub quickstart`: the whole loop on this machine, offline, in a few minutes on two CPUs.

train (packaged base, shipped sentiment data) -> bundle -> keygen (if you have no key) -> sign
-> start a local registry -> create a user -> log in -> upload your public key -> push -> pull
(verify) -> predict.

It works as you would by hand, in your HUB_HOME: a key made here is your signing key, and the
pulled adapter becomes your last pulled one (`hub predict "text"` uses it afterwards). The
registry's login is stored for its URL but does not become your default registry, since the
registry lives only as long as the quickstart (or until Ctrl-C with --keep-serving).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from hubcli.errors import UsageError
from registry_server.in_process import LocalRegistry

ADAPTER_NAME = "sentiment-adapter"
USER = "demo"
STEPS = ("train", "bundle", "keygen", "sign", "registry", "login", "keys upload", "push", "pull",
         "load", "predict")
SENTENCES = ("A gripping, beautifully acted film.", "The soup was cold and the waiter rude.",
             "Works exactly as advertised, I love it.", "I want my money back.")


@dataclass(frozen=True)
class QuickstartSettings:
    workdir: Path | None = None  # None: a temporary folder, removed at the end
    epochs: int = 5  # ~20 s on two idle cores; 2 epochs leave the demo unsure (0.80)
    max_length: int = 64
    sample: int | None = None  # train on the first N training sentences only
    port: int = 0  # 0: any free port
    keep_serving: bool = False
    sentences: tuple[str, ...] = SENTENCES
    quiet: bool = True  # False: `hub train`'s progress bar and one line per epoch while training


@dataclass(frozen=True)
class Step:
    number: int
    name: str
    seconds: float
    detail: str


@dataclass
class QuickstartResult:
    url: str
    ref: str
    adapter_path: Path
    predictions: list[tuple[str, str]]
    steps: list[Step] = field(default_factory=list)
    registry: LocalRegistry | None = None  # still serving when keep_serving
    workdir: Path | None = None  # kept while serving; removed by `close` when temporary
    temporary: bool = False

    def close(self) -> None:
        """Stop the registry (if still serving) and remove a temporary work folder."""
        if self.registry is not None:
            self.registry.stop()
        if self.temporary and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)


class _Steps:
    """Times each step and reports it when it ends."""

    def __init__(self, on_step: Callable[[Step], None]) -> None:
        self.on_step = on_step
        self.done: list[Step] = []

    @contextmanager
    def __call__(self, name: str) -> Iterator[list[str]]:
        detail: list[str] = []
        start = time.perf_counter()
        yield detail
        step = Step(STEPS.index(name) + 1, name, time.perf_counter() - start, " ".join(detail))
        self.done.append(step)
        self.on_step(step)


def run(settings: QuickstartSettings, on_step: Callable[[Step], None] = lambda _s: None,
        log: Callable[[str], None] = lambda _m: None) -> QuickstartResult:
    """Run the loop; `on_step` hears of each step as it finishes, `log` of each training
    epoch. With `keep_serving` the registry is still running on return (stop it with
    `result.close()`).

    Raises:
        UsageError: `settings.workdir` is not empty; the server dependencies are missing.
        HubError: any step failed (its own error: DataError, SignatureError, RegistryError...).
    """
    temporary = settings.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="hub-quickstart-") if temporary else settings.workdir)
    if not temporary and workdir.exists() and any(workdir.iterdir()):
        raise UsageError(f"{workdir} is not empty", hint="give a new or empty --workdir")
    workdir.mkdir(parents=True, exist_ok=True)
    registry = LocalRegistry(workdir / "registry", port=settings.port)
    result = QuickstartResult("", "", workdir, [], registry=registry, workdir=workdir,
                              temporary=temporary)
    try:
        _loop(settings, workdir, registry, _Steps(on_step), result, log)
    except BaseException:
        result.close()
        raise
    if not settings.keep_serving:
        result.close()
        result.registry = None
    return result


def _loop(s: QuickstartSettings, workdir: Path, registry: LocalRegistry, step: _Steps,
          into: QuickstartResult, log: Callable[[str], None]) -> None:
    from hubcli.remote import credentials
    from hubcli.remote import client as remote
    from hubcli.bundle import make_bundle
    from hubcli.remote.pull import pull
    from hubcli.signing import keys
    from hubcli.signing.sign import PASSPHRASE_ENV, create_signing_key, sign_bundle

    with step("train") as detail:
        out, summary = _train(s, workdir, log)
        detail.append(summary)
    with step("bundle") as detail:
        manifest = make_bundle(out)
        detail.append(f"{manifest['name']} {manifest['version']}: model card written")
    with step("keygen") as detail:
        if keys.private_key_path().exists():
            detail.append(f"using your key {keys.private_key_path()}")
        else:
            detail.append(f"created {create_signing_key().key_id}")
    with step("sign") as detail:
        detail.append(f"signed with {sign_bundle(out, None, os.environ.get(PASSPHRASE_ENV))}")
    with step("registry") as detail:
        url = registry.start()
        token = registry.create_user(USER)
        detail.append(f"serving {url} (user {USER})")
    with step("login") as detail:
        who = credentials.login(url, token, make_default=False)
        detail.append(f"logged in as {who['name']}")
    target = credentials.registry_remote(url, progress=False)
    with step("keys upload") as detail:
        key, _ = remote.upload_own_key(target, passphrase=os.environ.get(PASSPHRASE_ENV))
        detail.append(f"registered {key['key_id']}")
    with step("push") as detail:
        pushed = remote.push_bundle(target, out)
        detail.append(f"{pushed.repo_id} {pushed.version}, {sum(pushed.files.values()):,} bytes")
    with step("pull") as detail:
        result = pull(f"{pushed.repo_id}@{pushed.version}", target)
        detail.append(f"verified, signed by {result.signer}")
    with step("load") as detail:
        from hubcli.local.inference import load_predictor

        predictor = load_predictor(Path(result.record.path))
        detail.append(result.base)
    with step("predict") as detail:
        preds = predictor.predict([predictor.task.parse_input(t) for t in s.sentences])
        detail.append(f"{len(preds)} sentences")
    into.url, into.ref, into.adapter_path = url, result.record.ref, Path(result.record.path)
    into.predictions = [(t, predictor.task.describe(p)) for t, p in zip(s.sentences, preds)]
    into.steps = step.done


def _train(s: QuickstartSettings, workdir: Path, log: Callable[[str], None]
           ) -> tuple[Path, str]:
    """Train the sentiment adapter into workdir; returns (folder, one-line summary)."""
    from hubcli.data import sample_dataset
    from hubcli.local.train import TrainSettings, train

    train_tsv, dev_tsv = sample_dataset()
    if s.sample is not None:
        train_tsv = _head(train_tsv, s.sample, workdir / "train-sample.tsv")
    log(f"training {ADAPTER_NAME} for {s.epochs} epochs on {train_tsv.name} (the first of "
        f"{len(STEPS)} steps; one line per epoch)")
    result = train(TrainSettings(
        train=train_tsv, validation=dev_tsv, out=workdir / ADAPTER_NAME, name=ADAPTER_NAME,
        epochs=s.epochs, max_length=s.max_length, quiet=s.quiet,
        description="Sentiment (positive/negative) of short reviews; made by hub quickstart."),
        log=log)
    best = result.best or {}
    accuracy = f", dev accuracy {best['accuracy']:.3f}" if "accuracy" in best else ""
    return result.out, (f"{result.parameters['trainable']:,} trainable parameters, "
                        f"{s.epochs} epochs{accuracy}")


def _head(path: Path, rows: int, out: Path) -> Path:
    """The header and first `rows` data lines of a TSV file, written to `out`."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    out.write_text("".join(lines[: rows + 1]), encoding="utf-8")
    return out


def serve_until_interrupted(result: QuickstartResult) -> None:
    """Block until Ctrl-C (or SIGTERM), then stop the registry (see `QuickstartResult.close`).
    Call from the main thread."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        result.close()
