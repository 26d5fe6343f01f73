"""`hub serve`: one base, many adapters, over HTTP."""

from __future__ import annotations

import click

from hubcli.cli.model_cmds import attach_options, device_option
from hubcli.cli.output import notice_once
from hubcli.errors import UsageError

POSITIVE = click.IntRange(min=1)


@click.command("serve")
@click.argument("adapters", nargs=-1)
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--max-wait-ms", default=5.0, show_default=True, type=click.FloatRange(min=0),
              help="how long a request waits for others to share its pass (counted from "
                   "its arrival; only while every other worker is busy)")
@click.option("--max-batch-tokens", default=4096, show_default=True, type=POSITIVE,
              help="tokens in one forward pass (a larger request runs alone)")
@click.option("--queue-size", default=256, show_default=True, type=POSITIVE,
              help="requests waiting at most; more are answered 503")
@click.option("--max-inputs", default=64, show_default=True, type=POSITIVE,
              help="texts per request; more are answered 413")
@click.option("--max-text-chars", default=10_000, show_default=True, type=POSITIVE,
              help="characters per text; longer is answered 413")
@click.option("--no-batching", is_flag=True, help="run each request alone (for comparison)")
@click.option("--workers", type=POSITIVE,
              help="forward passes running at once, each on its share of the cores, so one "
                   "batch gathers while another runs (default: 2, or 1 on one core)")
@click.option("--allow-pull", is_flag=True,
              help="load a registry adapter (NS/NAME[@VERSION]) on its first request, verified")
@click.option("--max-adapters", type=POSITIVE,
              help="adapters attached at most; the least recently used is detached (default: "
                   "no limit)")
@click.option("--max-adapter-mb", type=click.FloatRange(min=0, min_open=True),
              help="memory the attached adapters may hold (weights, LayerNorm deltas, heads; "
                   "a composed adapter's components, shared ones once); the least recently "
                   "used are detached beyond it (default: no limit)")
@click.option("--admin-token", envvar="HUB_SERVE_ADMIN_TOKEN",
              help="bearer token for POST/DELETE /v1/adapters (env HUB_SERVE_ADMIN_TOKEN; "
                   "default: those endpoints are off)")
@click.option("--token", "tokens", multiple=True, envvar="HUB_SERVE_TOKENS",
              help="bearer token required to predict and list adapters (repeatable; env "
                   "HUB_SERVE_TOKENS, space-separated; default: open)")
@click.option("--access-log", type=click.Choice(["json", "text", "off"]), default="json",
              show_default=True, help="one JSON object per request on stderr, uvicorn's text "
                                      "lines, or none")
@click.option("--ray", "on_ray", is_flag=True,
              help="run as a Ray Serve deployment (the [ray] extra) on RAY_ADDRESS's cluster "
                   "(auto: `ray start`'s here) or a Ray of its own; requests name the adapter "
                   "in the serve_multiplexed_model_id header")
@click.option("--replicas", default=1, show_default=True, type=POSITIVE,
              help="Ray Serve replicas (with --ray)")
@device_option("cpu", "; on a GPU mixed batches gather their adapters (not with --ray)")
@attach_options
def serve_cmd(adapters, host, port, max_wait_ms, max_batch_tokens, queue_size, max_inputs,
              max_text_chars, no_batching, workers, allow_pull, max_adapters, max_adapter_mb,
              admin_token, tokens, access_log, on_ray, replicas, device, **attach) -> None:
    """Serve adapters over HTTP: hub serve ADAPTER... (folders or NS/NAME[@VERSION]).

    POST /v1/predict {"adapter": NAME, "inputs": [TEXT, ...]} answers what `hub predict
    --json` prints; "__base__" is the untouched base (sentence embeddings). Requests for any
    mix of adapters (fusions and stacked adapters too) arriving together run as one forward
    pass. Also GET /v1/adapters
    (POST, DELETE with --admin-token), /health, /ready, /metrics (Prometheus) and /docs.
    """
    if replicas != 1 and not on_ray:
        raise UsageError("--replicas needs --ray", hint="add --ray, or drop --replicas")
    if on_ray:
        given = {"--no-batching": no_batching, "--workers": workers,
                 "--max-adapters": max_adapters, "--max-adapter-mb": max_adapter_mb,
                 "--admin-token": admin_token, "--token": tokens,
                 "--access-log": access_log != "json", "--device": device != "cpu"}
        if unsupported := [flag for flag, value in given.items() if value]:
            raise UsageError(f"{', '.join(unsupported)} cannot be used with --ray",
                             hint="Ray Serve replicas batch (one pass at a time), evict (16 "
                                  "adapters each) and log on their own; drop the option or "
                                  "serve without --ray")
        # the request limits as without Ray (its replicas pull registry adapters anyway)
        _serve_on_ray(list(adapters), replicas=replicas, host=host, port=port,
                      max_wait_ms=max_wait_ms, max_batch_tokens=max_batch_tokens,
                      queue_size=queue_size, max_inputs=max_inputs,
                      max_text_chars=max_text_chars, **attach)
        return
    try:
        from hubcli.serving.server import serve
    except ImportError as err:  # the [serve] extra is optional
        raise UsageError(f"hub serve needs {err.name}, which is not installed",
                         hint='pip install "adapter-hub[serve]"') from None
    from hubcli.local.device import resolve
    from hubcli.serving.batcher import BatchSettings, default_workers
    from hubcli.serving.service import ServeSettings

    device = resolve(device)  # a device this machine lacks: refused before anything loads

    settings = ServeSettings(BatchSettings(max_wait_ms, max_batch_tokens, queue_size,
                                           batching=not no_batching,
                                           workers=workers or default_workers()),
                             max_inputs=max_inputs, max_text_chars=max_text_chars,
                             admin_token=admin_token,
                             # space-separated in one value (as the env var gives them);
                             # a blank one kept, to be refused: dropped, it would leave
                             # predicting open
                             tokens=tuple(t for arg in tokens for t in arg.split() or [arg]))
    max_bytes = None if max_adapter_mb is None else int(max_adapter_mb * 2**20)
    serve(list(adapters) or ["__base__"], settings, host=host, port=port,
          access_log=access_log, notify=notice_once(), allow_pull=allow_pull,
          max_adapters=max_adapters, max_bytes=max_bytes, device=device, **attach)


def _serve_on_ray(adapters: list[str], *, max_wait_ms: float, max_batch_tokens: int,
                  queue_size: int, max_inputs: int, max_text_chars: int, **options) -> None:
    """Raises UsageError: the [ray] extra is not installed."""
    try:
        from hubcli.serving.ray import run
    except ImportError as err:
        raise UsageError(f"hub serve --ray needs {err.name}, which is not installed",
                         hint='pip install "adapter-hub[ray]"') from None
    from hubcli.serving.batcher import BatchSettings
    from hubcli.serving.service import ServeSettings

    settings = ServeSettings(BatchSettings(max_wait_ms, max_batch_tokens, queue_size),
                             max_inputs=max_inputs, max_text_chars=max_text_chars)
    run(adapters, notify=notice_once(), settings=settings, **options)
