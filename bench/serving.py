"""python -m bench.serving: requests/s and time to first token of ``metalrt serve``
against llama.cpp's OpenAI-compatible server (``llama_cpp.server`` from the peers'
venv: ``python -m bench --install-peers --peers llama.cpp``) on the default model's
GGUF with the same threads, for 1, 4 and 16 concurrent clients.

Each client sends ``--requests`` streamed greedy completions one after another (a
distinct prompt each, so no server reuses another request's prompt cache) and the
time to the first streamed chunk is its time to first token. requests/s is all
requests over the wall time of the whole level. Both servers run in subprocesses on
127.0.0.1; the clients are threads of this process (the official openai client).
Writes ``bench/results/serving-<UTC timestamp>.json`` and prints a table.

``--hybrid-prefix [DIR]``: instead, ``metalrt serve`` of a hybrid (Gated-DeltaNet)
model (default: the tests' Qwen3.5-MoE twin at its released geometry,
``tests/python/real_geometry.py``) with and without the prefix cache, one client
sending ``--requests`` streamed greedy completions one after another: a prefix of
``--prompt-words`` English words and a question, then each request the previous
prompt and one more question (a conversation growing turn by turn): the first
request's time to first token (a whole prefill either way) and the later ones' (with
the cache they resume from the recurrent-state checkpoint at the previous prompt's
last block boundary and prefill only the rest). Writes
``bench/results/serving-hybrid-prefix-<UTC timestamp>.json``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Sequence

from metalrt.server.launch import ServerProcess, free_port, metalrt_command

from . import peers
from .__main__ import ROOT, TEXT, die_with_parent, load_average, machine, worker_env

STARTUP_SECONDS = 600


def server_command(engine: str, gguf: str, port: int, threads: int, peers_venv: Path) -> List[str]:
    """The command line of ``engine``'s server on 127.0.0.1:``port``."""
    if engine == "metalrt":
        return metalrt_command(port, "--model", gguf, "--device", "cpu", "--log-level", "warning")
    return [str(peers.python_of(peers_venv)), "-m", "llama_cpp.server", "--model", gguf,
            "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(threads),
            "--n_threads_batch", str(threads), "--n_ctx", "4096"]


def summary(values: Sequence[float]) -> Dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def run_level(server: ServerProcess, clients: int, requests: int, prompt: str, max_tokens: int) -> Dict:
    """``clients`` threads sending ``requests`` streamed completions each."""
    import openai

    ttfts: List[float] = []
    tokens = [0]
    lock = threading.Lock()

    def client(index: int) -> None:
        api = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0,
                            http_client=openai.DefaultHttpxClient(trust_env=False, timeout=600))
        for r in range(requests):
            start, first = time.perf_counter(), None
            stream = api.completions.create(
                model=server.model, prompt=f"Request {index}.{r}. {prompt}",
                max_tokens=max_tokens, temperature=0, stream=True)
            count = 0
            for chunk in stream:
                if first is None:
                    first = time.perf_counter() - start
                count += bool(chunk.choices and chunk.choices[0].text)
            with lock:
                ttfts.append(first)
                tokens[0] += count

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    wall = time.perf_counter() - start
    return {"clients": clients, "requests": clients * requests, "wall_seconds": round(wall, 3),
            "requests_per_s": clients * requests / wall, "ttft_s": summary(ttfts),
            "streamed_chunks_per_s": tokens[0] / wall}


def measure(engine: str, args, gguf: str, prompt: str) -> Dict:
    row = {"engine": engine, "levels": []}
    try:
        port = free_port()
        server = ServerProcess(server_command(engine, gguf, port, args.threads, args.peers_venv),
                               port, STARTUP_SECONDS, env=worker_env(args.threads), cwd=ROOT,
                               preexec_fn=die_with_parent)
    except RuntimeError as e:
        row["reason"] = f"the server did not start: {e}"
        return row
    try:
        for clients in args.clients:
            print(f"bench.serving: {engine}, {clients} clients", file=sys.stderr)
            row["levels"].append(run_level(server, clients, args.requests, prompt,
                                           args.max_tokens))
    finally:
        server.close()
    return row


def measure_hybrid_prefix(args, model: str, prefix: str) -> List[Dict]:
    """One row per prefix-cache setting: TTFTs of ``args.requests`` sequential
    completions, request r's prompt ``prefix`` and questions 0 .. r."""
    import openai

    rows = []
    for cached in (True, False):
        row = {"engine": "metalrt", "model": model, "prefix_cache": cached}
        rows.append(row)
        settings = ["--model", model, "--device", "cpu", "--log-level", "warning"]
        try:
            port = free_port()
            server = ServerProcess(metalrt_command(port, *settings, *(
                [] if cached else ["--no-prefix-cache"])), port, STARTUP_SECONDS,
                env=worker_env(args.threads), cwd=ROOT, preexec_fn=die_with_parent)
        except RuntimeError as e:
            row["reason"] = f"the server did not start: {e}"
            continue
        try:
            api = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0,
                                http_client=openai.DefaultHttpxClient(trust_env=False,
                                                                      timeout=600))
            ttfts, cached_tokens = [], []
            for r in range(args.requests):
                print(f"bench.serving: hybrid prefix, cache {cached}, request {r}",
                      file=sys.stderr)
                start, first, usage = time.perf_counter(), None, None
                prompt = prefix + "".join(f" Question {i}: what comes next?"
                                          for i in range(r + 1))
                for chunk in api.completions.create(
                        model=server.model, prompt=prompt,
                        max_tokens=args.max_tokens, temperature=0, stream=True,
                        stream_options={"include_usage": True}):
                    if first is None:
                        first = time.perf_counter() - start
                    usage = chunk.usage or usage
                ttfts.append(first)
                details = getattr(usage, "prompt_tokens_details", None) if usage else None
                cached_tokens.append(getattr(details, "cached_tokens", None))
                row.setdefault("prompt_tokens", []).append(usage.prompt_tokens if usage else None)
            row.update(ttft_first_s=ttfts[0], ttft_later_s=summary(ttfts[1:]),
                       ttft_s=ttfts, cached_tokens=cached_tokens)
        finally:
            server.close()
    return rows


def print_hybrid_prefix(rows: List[Dict]) -> None:
    print("Serving: a repeated long prefix on a hybrid model, one client")
    print(f"{'prefix cache':<13} {'prompt tokens':>20} {'TTFT first s':>13} "
          f"{'TTFT later median s':>20} {'cached tokens':>18}")
    for row in rows:
        if "reason" in row:
            print(f"{str(row['prefix_cache']):<13} {row['reason']}")
            continue
        print(f"{str(row['prefix_cache']):<13} {str(row['prompt_tokens']):>20} "
              f"{row['ttft_first_s']:>13.3f} {row['ttft_later_s']['median']:>20.3f} "
              f"{str(row['cached_tokens'][1:]):>18}")


def parse(argv: List[str]):
    p = argparse.ArgumentParser(prog="python -m bench.serving", description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", default="1,4,16",
                   help="comma-separated concurrency levels (default: %(default)s)")
    p.add_argument("--requests", type=int, default=4, help="requests per client (default: 4)")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens per request (default: 32)")
    p.add_argument("--prompt-words", type=int, default=48,
                   help="words of English text per prompt (default: 48)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="threads of each server (default: all CPUs)")
    p.add_argument("--engines", default="metalrt,llama.cpp",
                   help="comma-separated servers to measure (default: %(default)s)")
    p.add_argument("--quick", action="store_true",
                   help="1 client, 2 requests of 4 tokens: a smoke test, not a figure")
    p.add_argument("--peers-venv", type=Path, default=None,
                   help="the peers' venv (default: as python -m bench)")
    p.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--hybrid-prefix", nargs="?", const="", default=None, metavar="DIR",
                   help="TTFT of a repeated long prefix on a hybrid model (default: the "
                        "tests' Qwen3.5-MoE twin at released geometry) with and without "
                        "the prefix cache, instead of the client levels")
    args = p.parse_args(argv)
    try:
        args.clients = [int(c) for c in args.clients.split(",") if c.strip()]
    except ValueError:
        p.error(f"--clients must be comma-separated integers, got {args.clients!r}")
    if args.quick:
        args.clients, args.requests, args.max_tokens, args.prompt_words = [1], 2, 4, 12
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if set(args.engines) - {"metalrt", "llama.cpp"}:
        p.error(f"--engines: known servers are metalrt and llama.cpp, got {args.engines}")
    for name in ("requests", "max_tokens", "prompt_words", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if not args.clients or min(args.clients) < 1:
        p.error("--clients must name levels >= 1")
    args.peers_venv = (args.peers_venv.expanduser().absolute() if args.peers_venv
                       else peers.default_venv())
    return args


def print_table(rows: List[Dict]) -> None:
    print("Serving: streamed greedy completions over HTTP (OpenAI API)")
    print(f"{'server':<10} {'clients':>7} {'requests':>8} {'req/s':>8} {'TTFT median s':>14} "
          f"{'TTFT max s':>11}")
    for row in rows:
        if "reason" in row:
            print(f"{row['engine']:<10} {row['reason']}")
        for level in row["levels"]:
            print(f"{row['engine']:<10} {level['clients']:>7} {level['requests']:>8} "
                  f"{level['requests_per_s']:>8.2f} {level['ttft_s']['median']:>14.3f} "
                  f"{level['ttft_s']['max']:>11.3f}")


def main(argv: List[str]) -> int:
    from metalrt.default_model import default_model_path

    args = parse(argv)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    if args.hybrid_prefix is not None:
        return hybrid_prefix_main(args, stamp)
    gguf = str(default_model_path())
    prompt = " ".join((TEXT * 8).split()[:args.prompt_words])
    rows = []
    for engine in args.engines:
        if engine == "llama.cpp":
            state = peers.availability(args.peers_venv, ["llama.cpp"])["llama.cpp"]
            if not state["available"]:
                rows.append({"engine": engine, "levels": [], "reason": state["reason"]})
                continue
        rows.append(measure(engine, args, gguf, prompt))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"serving-{stamp}.json"
    out.write_text(json.dumps({"machine": machine(), "threads": args.threads, "quick": args.quick,
                               "requests_per_client": args.requests,
                               "max_tokens": args.max_tokens, "prompt_words": args.prompt_words,
                               "rows": rows}, indent=1))
    print_table(rows)
    print(f"bench.serving: wrote {out}", file=sys.stderr)
    return 0


def hybrid_prefix_main(args, stamp: str) -> int:
    model = args.hybrid_prefix
    if not model:
        sys.path.insert(0, str(ROOT / "tests" / "python"))
        import real_geometry

        model = str(real_geometry.fixture("qwen3_5_moe", "hf")[0])
    prefix = " ".join((TEXT * 16).split()[:args.prompt_words])
    load_before = load_average()
    rows = measure_hybrid_prefix(args, model, prefix)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"serving-hybrid-prefix-{stamp}.json"
    out.write_text(json.dumps({"machine": machine(), "threads": args.threads,
                               "load_average_before": load_before,
                               "load_average_after": load_average(),
                               "requests": args.requests, "max_tokens": args.max_tokens,
                               "prompt_words": args.prompt_words, "rows": rows}, indent=1))
    print_hybrid_prefix(rows)
    print(f"bench.serving: wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
