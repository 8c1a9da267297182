"""``GET /metrics``: the server's counters in Prometheus' text format
(prometheus-client): requests by finish reason, prompt and generated tokens, time to
first token and inter-token latency histograms, and, read from the engine at each
scrape, running and waiting requests, KV-cache use and the prefix-cache hit rate."""
from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class Metrics:
    """The metrics of the server's engine loops, in their own ``registry``:
    ``engine_loops()`` lists the loaded ones (their counts are summed; with several
    models the ratios are over all their KV blocks and prompt tokens). ``observe`` is
    called by an engine thread for each event a request receives."""

    def __init__(self, engine_loops):
        self.registry = r = CollectorRegistry()
        self.requests = Counter("metalrt_requests", "Requests finished, by finish reason",
                                ["finish_reason"], registry=r)
        self.prompt_tokens = Counter("metalrt_prompt_tokens", "Prompt tokens of finished "
                                     "requests", registry=r)
        self.generation_tokens = Counter("metalrt_generation_tokens", "Tokens generated",
                                         registry=r)
        self.ttft = Histogram("metalrt_time_to_first_token_seconds", "From submission to the "
                              "first generated token", buckets=LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("metalrt_inter_token_latency_seconds", "Between two generated "
                             "tokens of a request", buckets=LATENCY_BUCKETS, registry=r)

        def total(*names):
            stats = [loop.stats() for loop in engine_loops()]
            return [sum(s[name] for s in stats) for name in names]

        def stat(name):
            return lambda: total(name)[0]

        def kv_usage():
            free, blocks = total("kv_blocks_free", "kv_blocks")
            return 1 - free / blocks if blocks else 0.0

        def hit_rate():
            cached, computed = total("prompt_tokens_cached", "prompt_tokens_computed")
            return cached / (cached + computed) if cached + computed else 0.0

        for name, doc, read in (
                ("metalrt_requests_running", "Requests in the running batch", stat("running")),
                ("metalrt_requests_waiting", "Requests waiting for admission (queue depth)",
                 stat("waiting")),
                ("metalrt_kv_cache_usage_ratio", "KV-cache blocks in use / all", kv_usage),
                ("metalrt_prefix_cache_hit_ratio", "Prompt tokens served from the prefix "
                 "cache / all prompt tokens", hit_rate)):
            Gauge(name, doc, registry=r).set_function(read)

    def observe(self, generation, event) -> None:
        now = time.monotonic()
        if event.token is not None:
            self.generation_tokens.inc()
            if generation.last_token_at is None:
                self.ttft.observe(now - generation.submitted_at)
            else:
                self.itl.observe(now - generation.last_token_at)
            generation.last_token_at = now
        if event.finish_reason or event.error:
            self.requests.labels(event.finish_reason or "error").inc()
            self.prompt_tokens.inc(event.prompt_tokens)
