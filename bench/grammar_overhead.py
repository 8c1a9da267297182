"""python -m bench.grammar_overhead: decode tokens/s of ``metalrt serve`` (default
model, CPU) with and without a JSON schema, same server, one run.

Five streamed sampled requests (T=1, seeds 0-4, 64 tokens) each way after one warm-up
request; a request's rate is its tokens after the first over the time from its first
chunk to its end; the median of the five is reported.
"""
from __future__ import annotations

import statistics
import time

import openai

from metalrt.server.launch import ServerProcess, free_port, metalrt_command

from .grammar_mask import SCHEMA

MESSAGES = [{"role": "user", "content": "Describe a pet as JSON."}]


def rate(client, model, response_format, seed) -> float:
    kwargs = dict(model=model, messages=MESSAGES, temperature=1.0, seed=seed, max_tokens=64,
                  stream=True, stream_options={"include_usage": True})
    if response_format:
        kwargs["response_format"] = response_format
    first, tokens = None, 0
    for chunk in client.chat.completions.create(**kwargs):
        if chunk.choices and first is None:
            first = time.perf_counter()
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
    return (tokens - 1) / (time.perf_counter() - first)


def main() -> int:
    port = free_port()
    server = ServerProcess(metalrt_command(port, "--device", "cpu", "--log-level", "warning"),
                           port)
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused",
                               http_client=openai.DefaultHttpxClient(trust_env=False))
        schema = {"type": "json_schema", "json_schema": {"name": "pet", "schema": SCHEMA}}
        rate(client, server.model, None, 0)
        free = statistics.median(rate(client, server.model, None, s) for s in range(5))
        constrained = statistics.median(rate(client, server.model, schema, s) for s in range(5))
    finally:
        server.close()
    print(f"decode tok/s: free {free:.1f}, json_schema {constrained:.1f} "
          f"(ratio {constrained / free:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
