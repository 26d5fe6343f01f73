"""`hub serve`: one frozen base answering HTTP requests for many adapters, requests for any mix
of them batched into one routed forward pass (engine, batcher, the FastAPI app, metrics).
Sits above `hubcli.api`; nothing below imports it."""
