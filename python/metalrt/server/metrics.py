"""``GET /metrics``: the server's counters in Prometheus' text format
(prometheus-client), each labelled with the ``model`` id it concerns: requests by
finish reason, prompt and generated tokens, time to first token and inter-token
latency histograms, and, read from each loaded model's engine at each scrape, running
and waiting requests, KV-cache use and the prefix-cache hit rate (``sum by`` or
``sum without (model)`` gives the server's totals)."""
from __future__ import annotations

import time
from typing import Callable, Dict

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


def _kv_usage(stats: dict) -> float:
    blocks = stats["kv_blocks"]
    return 1 - stats["kv_blocks_free"] / blocks if blocks else 0.0


def _hit_rate(stats: dict) -> float:
    cached, computed = stats["prompt_tokens_cached"], stats["prompt_tokens_computed"]
    return cached / (cached + computed) if cached + computed else 0.0


# name, help, value of one engine's stats: the gauges read at each scrape.
ENGINE_GAUGES = (
    ("metalrt_requests_running", "Requests in the running batch", lambda s: s["running"]),
    ("metalrt_requests_waiting", "Requests waiting for admission (queue depth)",
     lambda s: s["waiting"]),
    ("metalrt_kv_cache_usage_ratio", "KV-cache blocks in use / all", _kv_usage),
    ("metalrt_prefix_cache_hit_ratio", "Prompt tokens served from the prefix cache / all "
     "prompt tokens", _hit_rate))


class _EngineGauges:
    """A prometheus collector of ``ENGINE_GAUGES`` for each loaded model."""

    def __init__(self, engine_loops: Callable[[], Dict[str, object]]):
        self.engine_loops = engine_loops

    def collect(self):
        stats = {name: loop.stats() for name, loop in self.engine_loops().items()}
        for name, doc, read in ENGINE_GAUGES:
            family = GaugeMetricFamily(name, doc, labels=["model"])
            for model, values in stats.items():
                family.add_metric([model], read(values))
            yield family


class Metrics:
    """The metrics of the server's engine loops, in their own ``registry``:
    ``engine_loops()`` maps each loaded model's id to its engine loop. ``observer(id)``
    is the function an engine thread of model ``id`` calls for each event a request
    receives (``EngineLoop.observer``)."""

    def __init__(self, engine_loops: Callable[[], Dict[str, object]]):
        self.registry = r = CollectorRegistry()
        self.requests = Counter("metalrt_requests", "Requests finished, by finish reason",
                                ["model", "finish_reason"], registry=r)
        self.prompt_tokens = Counter("metalrt_prompt_tokens", "Prompt tokens of finished "
                                     "requests", ["model"], registry=r)
        self.generation_tokens = Counter("metalrt_generation_tokens", "Tokens generated",
                                         ["model"], registry=r)
        self.ttft = Histogram("metalrt_time_to_first_token_seconds", "From submission to the "
                              "first generated token", ["model"], buckets=LATENCY_BUCKETS,
                              registry=r)
        self.itl = Histogram("metalrt_inter_token_latency_seconds", "Between two generated "
                             "tokens of a request", ["model"], buckets=LATENCY_BUCKETS,
                             registry=r)
        r.register(_EngineGauges(engine_loops))

    def observer(self, model: str) -> Callable[[object, object], None]:
        """``observe`` for the requests of ``model``."""
        return lambda generation, event: self.observe(model, generation, event)

    def observe(self, model: str, generation, event) -> None:
        now = time.monotonic()
        if event.token is not None:
            self.generation_tokens.labels(model).inc()
            if generation.last_token_at is None:
                self.ttft.labels(model).observe(now - generation.submitted_at)
            else:
                self.itl.labels(model).observe(now - generation.last_token_at)
            generation.last_token_at = now
        if event.finish_reason or event.error:
            self.requests.labels(model, event.finish_reason or "error").inc()
            self.prompt_tokens.labels(model).inc(event.prompt_tokens)
