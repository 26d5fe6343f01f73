"""Prometheus metrics of one server, in a registry of its own (two apps in one process, as in
tests, never collide)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.latency = Histogram("hub_serve_request_seconds", "Time to answer /v1/predict",
                                 ["status"], buckets=LATENCY_BUCKETS, registry=r)
        self.batch_rows = Histogram("hub_serve_batch_rows", "Texts per forward pass",
                                    buckets=SIZE_BUCKETS, registry=r)
        self.batch_requests = Histogram("hub_serve_batch_requests", "Requests per forward pass",
                                        buckets=SIZE_BUCKETS, registry=r)
        self.queue_depth = Gauge("hub_serve_queue_depth", "Requests waiting for the worker",
                                 registry=r)
        self.adapter_loads = Counter("hub_serve_adapter_loads_total", "Adapters attached",
                                     registry=r)
        self.adapter_hits = Counter("hub_serve_adapter_hits_total",
                                    "Requests for an adapter already attached", ["adapter"],
                                    registry=r)
        self.adapter_evictions = Counter("hub_serve_adapter_evictions_total",
                                         "Adapters detached to make room", registry=r)

    def observe_batch(self, rows: int, requests: int) -> None:
        self.batch_rows.observe(rows)
        self.batch_requests.observe(requests)

    def adapter_event(self, kind: str, name: str) -> None:
        """What the pool reports: "hit", "load" or "evict" of adapter `name`."""
        if kind == "hit":
            self.adapter_hits.labels(name).inc()
        elif kind == "load":
            self.adapter_loads.inc()
        else:
            self.adapter_evictions.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
