"""`hub login|logout|whoami`, `hub keys upload|list`, `hub push`, `hub pull`, `hub search`,
`hub quickstart`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from hubcli.cli.output import echo_json, notice, table

JSON = click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
REGISTRY = click.option("--registry", metavar="URL",
                        help="registry URL [default: $HUB_ENDPOINT, else the one you logged "
                             "in to, else http://127.0.0.1:8000]")
TOKEN = click.option("--token", help="API token [default: $HUB_TOKEN, else the stored one]")
QUIET = click.option("--quiet", is_flag=True, help="no progress bars or notices")


def _remote(target: str, registry: str | None, token: str | None, quiet: bool):
    """Our registry, or the Hugging Face Hub; progress bars only on a terminal."""
    from hubcli.remote import credentials
    from hubcli.errors import UsageError

    progress = not quiet and sys.stderr.isatty()
    if target == "registry":
        return credentials.registry_remote(registry, token, progress=progress)
    if registry:
        raise UsageError("--registry is for our registry; the Hugging Face Hub is set by "
                         "HF_ENDPOINT", hint="leave out --registry, or --to/--from registry")
    return credentials.hf_remote(token, progress=progress)


def _say(quiet: bool):
    return (lambda _m: None) if quiet else notice


@click.command("login")
@REGISTRY
@click.option("--token", help="the token (visible in your shell history: prefer stdin or "
                              "the prompt)")
def login(registry: str | None, token: str | None) -> None:
    """Log in to a registry: check the token, store it (owner-only) under HUB_HOME, and use
    the registry by default. The token is read from --token, stdin, or a prompt."""
    from hubcli.remote import credentials

    if token is None:
        token = (sys.stdin.readline() if not sys.stdin.isatty()
                 else click.prompt("Token", hide_input=True))
    who = credentials.login(registry, token)
    click.echo(f"logged in to {who['registry']} as {who['name']}; token stored in "
               f"{credentials.tokens_path()}")


@click.command("logout")
@REGISTRY
def logout(registry: str | None) -> None:
    """Forget the token stored for a registry."""
    from hubcli.remote import credentials

    url = credentials.logout(registry)
    click.echo(f"logged out of {url}" if url else "no token was stored for "
               f"{credentials.registry_endpoint(registry)}")


@click.command("whoami")
@REGISTRY
@TOKEN
@JSON
def whoami(registry: str | None, token: str | None, as_json: bool) -> None:
    """Show who the registry thinks you are."""
    from hubcli.remote import client as remote_api

    target = _remote("registry", registry, token, quiet=True)
    who = remote_api.whoami(target)
    role = who.get("auth", {}).get("accessToken", {}).get("role", "?")
    orgs = [o["name"] for o in who.get("orgs", [])]
    if as_json:
        echo_json({"registry": target.endpoint, "name": who["name"], "orgs": orgs,
                   "token_role": role})
    else:
        click.echo(f"{who['name']} on {target.endpoint} (token: {role}"
                   + (f"; orgs: {', '.join(orgs)})" if orgs else ")"))


@click.group("keys")
def keys() -> None:
    """Your signing public keys on a registry (pushes must be signed by one of them)."""


@keys.command("upload")
@REGISTRY
@TOKEN
@click.option("--name", default="", help="a label for the key on the registry [default: "
                                          "your `hub keygen --name`]")
def keys_upload(registry: str | None, token: str | None, name: str) -> None:
    """Register the public key made by `hub keygen` with the registry, proving that you hold
    its private key (it signs a challenge from the registry)."""
    from hubcli.cli.signing_cmds import ask_passphrase
    from hubcli.remote import client as remote_api

    key, created = remote_api.upload_own_key(_remote("registry", registry, token, True), name,
                                             ask_passphrase())
    click.echo(f"{'registered' if created else 'already registered'}: {key['key_id']}")


@keys.command("list")
@REGISTRY
@TOKEN
@JSON
def keys_list(registry: str | None, token: str | None, as_json: bool) -> None:
    """List the signing keys registered to you."""
    from hubcli.remote import client as remote_api

    items = remote_api.list_keys(_remote("registry", registry, token, True))
    if as_json:
        echo_json([{k: v for k, v in key.items() if k != "pem"} for key in items])
    elif not items:
        click.echo("no keys registered; run `hub keys upload`")
    else:
        table(["key id", "name", "added"],
              [(k["key_id"], k["name"] or "-", k["created_at"]) for k in items], max_width=80)


@click.command("push")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--to", "target", type=click.Choice(["registry", "hf"]), default="registry",
              show_default=True, help="our registry, or the Hugging Face Hub")
@click.option("--repo", help="NAMESPACE/NAME [default: your user name / the manifest's name]")
@click.option("--private", is_flag=True, help="create the repository private")
@click.option("--base", "is_base", is_flag=True,
              help="DIRECTORY is a base model folder (safetensors weights, config.json, "
                   "tokenizer files), published for adapters to be found against "
                   "[default repo: your user name / the folder's name]")
@REGISTRY
@TOKEN
@QUIET
@JSON
def push(directory: Path, target: str, repo: str | None, private: bool, is_base: bool,
         registry: str | None, token: str | None, quiet: bool, as_json: bool) -> None:
    """Publish a signed bundle; its manifest's version becomes a tag. With --base, publish a
    base model folder instead (the registry numbers its versions)."""
    from hubcli.remote import client as remote_api
    from hubcli.remote.bases import push_base

    remote = _remote(target, registry, token, quiet)
    publish = push_base if is_base else remote_api.push_bundle
    result = publish(remote, directory, repo_id=repo, private=private, notify=_say(quiet))
    if as_json:
        echo_json({"repo_id": result.repo_id, "version": result.version,
                   "commit": result.commit, "url": result.url, "created": result.created,
                   "endpoint": remote.endpoint, "files": result.files})
    elif result.created:
        click.echo(f"pushed {result.repo_id} {result.version} (commit {result.commit[:12]}): "
                   f"{result.url}")
    else:
        click.echo(f"{result.repo_id} {result.version} was published already with the same "
                   f"files; nothing to do: {result.url}")


@click.command("pull")
@click.argument("ref", metavar="NAMESPACE/NAME[@VERSION]")
@click.option("--from", "source", type=click.Choice(["registry", "hf"]), default="registry",
              show_default=True, help="our registry, or the Hugging Face Hub")
@click.option("--allow-unsigned", is_flag=True,
              help="keep an unsigned or untrusted adapter (with a warning; using it needs "
                   "--allow-unsigned again)")
@REGISTRY
@TOKEN
@QUIET
@JSON
def pull(ref: str, source: str, allow_unsigned: bool, registry: str | None, token: str | None,
         quiet: bool, as_json: bool) -> None:
    """Download an adapter, verify it, and make it the one `hub predict` uses by default."""
    from hubcli.remote.pull import pull as pull_adapter

    result = pull_adapter(ref, _remote(source, registry, token, quiet),
                          allow_unsigned=allow_unsigned, notify=_say(quiet))
    r = result.record
    for warning in result.warnings:
        notice(warning)
    if as_json:
        echo_json({"ref": r.ref, "repo_id": r.repo_id, "version": r.version, "path": r.path,
                   "commit": r.commit, "source": r.source, "key_id": r.key_id,
                   "signer": result.signer, "base": result.base,
                   "components": [{"ref": c.ref, "path": c.path} for c in result.components]})
        return
    click.echo(f"pulled {r.ref} into {r.path}")
    for c in result.components:
        click.echo(f"  requires {c.ref}: {c.path}")
    click.echo(f"  signed by {result.signer}")
    click.echo(f"  {result.base}")
    click.echo(f"next: hub predict {r.ref} \"some text\"")


@click.command("search")
@click.argument("words", nargs=-1)
@click.option("--task", help="classification, regression, tagging or qa")
@click.option("--head", "head_type", help="head type, e.g. sequence_classification")
@click.option("--base", help="base model: content hash, local folder, or (part of) the name "
                             "of a base on this machine, e.g. minilm")
@click.option("--tag", "tags", multiple=True, help="a tag every result has (repeatable)")
@click.option("--namespace", help="only this user's or organisation's adapters")
@click.option("--sort", type=click.Choice(["downloads", "recent", "name"]), default="downloads",
              show_default=True)
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@REGISTRY
@TOKEN
@JSON
def search(words: tuple[str, ...], base: str | None, registry: str | None, token: str | None,
           as_json: bool, **filters) -> None:
    """Find adapters on the registry: hub search sentiment --base minilm."""
    from hubcli.remote import client as remote_api
    from hubcli.base.ref import base_filter

    base_hash, base_model = base_filter(base) if base else (None, None)
    query = remote_api.SearchFilters(text=" ".join(words), base_hash=base_hash,
                                     base_model=base_model, **filters)
    page = remote_api.search(_remote("registry", registry, token, True), query)
    if as_json:
        echo_json(page)
    elif not page["items"]:
        click.echo("no adapters found")
    else:
        table(["adapter", "version", "task", "base", "downloads", "description"],
              [(a["id"], a["latest_version"], a["task"], a["base_model"]["name"],
                a["downloads"], a["description"]) for a in page["items"]], max_width=40)
        click.echo(f"({len(page['items'])} of {page['total']})")


@click.command("quickstart")
@click.option("--epochs", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--sample", type=click.IntRange(min=8), help="train on the first N sentences only")
@click.option("--port", type=click.IntRange(0, 65535), default=0,
              help="registry port [default: any free one]")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              help="keep the adapter and the registry's data here [default: a temporary folder]")
@click.option("--keep-serving", is_flag=True, help="keep the registry running until Ctrl-C")
@click.option("--quiet", is_flag=True, help="no progress bar or epoch lines while training")
def quickstart(keep_serving: bool, quiet: bool, **opts) -> None:
    """Run the whole loop offline: train, bundle, sign, push to a local registry, pull, predict."""
    from hubcli import quickstart as qs

    def show(step: qs.Step) -> None:
        click.echo(f"[{step.number:>2}/{len(qs.STEPS)}] {step.name:<11} {step.seconds:6.1f} s  "
                   f"{step.detail}")

    result = qs.run(qs.QuickstartSettings(keep_serving=keep_serving, quiet=quiet, **opts),
                    on_step=show, log=_say(quiet))
    table(["text", "prediction"], result.predictions)
    click.echo(f"done in {result.seconds:.1f} s; `hub predict \"some text\"` now uses {result.ref}")
    if not keep_serving:
        click.echo("the registry is stopped; run `hub quickstart --keep-serving` to browse it")
        return
    click.echo(f"web UI: {result.url}/  (registry data in {result.workdir}; Ctrl-C to stop)")
    qs.serve_until_interrupted(result)
