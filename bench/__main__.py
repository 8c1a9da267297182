"""python -m bench: metalrt's benchmarks in one sitting (issue 6, DESIGN §8).

    python -m bench [--quick] [--threads N] [--runs N] [--out-dir DIR]
    python -m bench --install-peers [--peers-venv DIR]   # once: the peers' venv

Writes ``bench/results/<UTC timestamp>.json`` and prints the tables:
1. end-to-end generation on the default model (prefill tokens/s for 128- and
   512-token prompts, decode tokens/s for 128 greedy tokens, peak memory) for
   metalrt on the CPU and on Metal, and for each peer installed in the peers' venv
   (transformers + torch fp32/bf16, MLX's CPU build with mlx-lm, llama.cpp through
   llama-cpp-python), each engine in a subprocess with the same prompt ids and
   thread count; a peer that is not installed or fails is a row with its reason;
2. op micro-benchmarks per device (``bench/op_micro.py``);
3. the Metal-path counters of one prefill and one decode step (``bench/counters.py``).

On the simulated Metal device the generation row runs smaller sizes and every time
is labelled as a simulation time, not a performance figure. ``--quick`` (the CI
smoke test) shrinks every size; its figures are not comparable to a full run.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from . import peers

ROOT = Path(__file__).resolve().parent.parent
TEXT = ("The history of the city begins with a small settlement of fishermen on the river "
        "bank. Over the centuries it grew into a busy market town, then a harbour, and at "
        "last a capital whose libraries, bridges and gardens drew travellers from far away. ")

FULL = {"prompt_lengths": [128, 512], "decode_tokens": 128}
QUICK = {"prompt_lengths": [16, 64], "decode_tokens": 8}
SIM = {"prompt_lengths": [4], "decode_tokens": 4}         # the simulated Metal device
SECTIONS = ("generation", "ops", "counters")
SIM_QUICK = None                                           # --quick: counters only


def prompt_ids(tokenizer, n: int) -> List[int]:
    """Exactly n token ids of an English text (repeated as needed)."""
    ids = tokenizer.encode(TEXT * (1 + n // 20))
    if len(ids) < n:
        raise ValueError(f"[bench] the prompt text gives {len(ids)} tokens, {n} needed")
    return ids[:n]


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} CPUs, {platform.system()} {platform.machine()}"


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (user + system)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def worker_env(threads: int) -> Dict[str, str]:
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "METALRT_CPU_THREADS",
              "METALRT_SIM_THREADS"):
        env[k] = str(threads)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["TOKENIZERS_PARALLELISM"] = "false"
    return env


def run_worker(python: str, spec: Dict, threads: int, timeout: float) -> Dict:
    """Runs bench.generation with ``spec`` in a subprocess; its result, or
    {"reason": ...} with the worker's last words when it fails."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        proc = subprocess.run([python, "-m", "bench.generation", f.name], capture_output=True,
                              text=True, env=worker_env(threads), cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"reason": f"failed: no result within {timeout:.0f} s"}
    finally:
        os.unlink(f.name)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        said = [l for l in proc.stderr.strip().splitlines() if l.strip()][-2:]
        return {"reason": f"failed (exit {proc.returncode}): {' / '.join(said)}"}
    return json.loads(lines[-1])


def export_hf(python: str, gguf: str, out: Path, threads: int) -> str:
    """Writes the GGUF as a Hugging Face directory (float32 safetensors and
    tokenizer) with the peers' transformers (``bench/export_hf.py``), once per peers'
    venv; the transformers and mlx rows load it. "" or the reason it could not."""
    if (out / "config.json").exists():
        return ""
    proc = subprocess.run([python, "-m", "bench.export_hf", gguf, str(out)], capture_output=True,
                          text=True, env=worker_env(threads), cwd=ROOT)
    if proc.returncode != 0:
        return "could not export the GGUF to a Hugging Face directory: " + \
            " / ".join(proc.stderr.strip().splitlines()[-2:])
    return ""


def generation(args, gguf: str, tokenizer, sizes: Dict, save) -> Dict:
    """The generation section; ``save(rows)`` is called after every row."""
    import metalrt

    lengths = sizes["prompt_lengths"]
    rows = []

    def spec(engine, variant, s, **extra):
        return {"engine": engine, "variant": variant, "gguf": gguf, "threads": args.threads,
                "runs": args.runs, "prompt_lengths": s["prompt_lengths"],
                "decode_tokens": s["decode_tokens"],
                "prompts": {str(n): prompt_ids(tokenizer, n) for n in s["prompt_lengths"]},
                **extra}

    def add(engine, variant, python, s, simulated=False, **extra):
        row = {"engine": engine, "variant": variant}
        if args.engines and f"{engine} {variant}" not in args.engines:
            row["reason"] = "not measured in this run (--engines)"
        else:
            print(f"bench: generation: {engine} {variant}", file=sys.stderr)
            start = time.time()
            row.update(run_worker(python, spec(engine, variant, s, **extra), args.threads,
                                  args.timeout))
            # The worker's wall time, loading included: where a run's minutes go.
            row["worker_seconds"] = round(time.time() - start, 1)
            if simulated:
                row["sizes"] = s
                row["note"] = "simulated: not a performance figure"
        rows.append(row)
        save(rows)

    add("metalrt", "cpu", sys.executable, sizes)
    if metalrt.is_available("metal"):
        simulated = not metalrt.device_info("metal")["name"].startswith("Apple")
        sim_sizes = (SIM if not args.quick else SIM_QUICK) if simulated else sizes
        if sim_sizes:
            add("metalrt", "metal", sys.executable, sim_sizes, simulated=simulated)
        else:
            rows.append({"engine": "metalrt", "variant": "metal", "reason":
                         "simulated device: skipped by --quick (see the counters)"})
    available = peers.availability(args.peers_venv)
    python = str(peers.python_of(args.peers_venv))
    hf_dir = Path(args.peers_venv) / "smollm2-hf-from-gguf"
    export = {}   # the export's outcome ("" or the reason), made once for every peer

    def export_reason() -> str:
        if "reason" not in export:
            export["reason"] = (export_hf(python, gguf, hf_dir, args.threads)
                                if available["transformers"]["available"] else
                                "needs the transformers peer to export the GGUF (no safetensors "
                                "of SmolLM2 are reachable from this machine)")
        return export["reason"]

    for peer in peers.PEERS:
        if peer.name not in args.peers:
            continue
        state = available[peer.name]
        extra = {}
        wanted = not args.engines or any(f"{peer.name} {v}" in args.engines for v in peer.variants)
        if state["available"] and peer.loads_hf_export and wanted:
            if export_reason():
                state = {"available": False, "reason": export_reason()}
            extra["hf_dir"] = str(hf_dir)
        for variant in peer.variants:
            if state["available"]:
                add(peer.name, variant, python, sizes, **extra)
            else:
                rows.append({"engine": peer.name, "variant": variant, "reason": state["reason"]})
    return {"prompt_lengths": lengths, "decode_tokens": sizes["decode_tokens"], "runs": args.runs,
            "rows": rows}


def op_benchmarks(args) -> List[Dict]:
    import metalrt
    from . import op_micro

    rows = []
    for device in ("cpu", "metal"):
        if not metalrt.is_available(device):
            continue
        simulated = device == "metal" and not metalrt.device_info(device)["name"].startswith("Apple")
        print(f"bench: op micro-benchmarks on {device}", file=sys.stderr)
        # The simulated device runs every shape too (under a minute in all), but
        # with the fewest repeats: its times are simulation times.
        repeats = 3 if args.quick or simulated else args.op_repeats
        for row in op_micro.run(device, args.quick, repeats):
            row["simulated"] = simulated
            rows.append(row)
    return rows


def counters(tokenizer, gguf: str) -> Dict:
    import metalrt
    from . import counters as metal_counters

    if not metalrt.is_available("metal"):
        return {"error": "no Metal device in this build"}
    print("bench: Metal-path counters", file=sys.stderr)
    model, _ = metalrt.load(gguf, device="metal")
    return metal_counters.run(model, tokenizer.encode("Once upon a time"), decode_steps=3)


def parse(argv: List[str]):
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="small sizes for a smoke test (< 3 min on 2 cores)")
    p.add_argument("--install-peers", action="store_true",
                   help="install the peers into --peers-venv, then exit")
    p.add_argument("--peers-venv", type=Path, default=peers.default_venv(),
                   help="the peers' venv (default: $METALRT_BENCH_VENV, else bench-peers "
                        "in $METALRT_CACHE_DIR or ~/.cache/metalrt)")
    p.add_argument("--peers", default=",".join(peers.peer_names()),
                   help="comma-separated peers to install or run (default: all)")
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help="comma-separated sections to run (default: all of "
                        f"{', '.join(SECTIONS)})")
    p.add_argument("--engines", default="",
                   help="comma-separated generation rows to measure, e.g. 'metalrt cpu,"
                        "transformers fp32' (default: all; the others are rows that say so)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="threads for every engine (default: all CPUs)")
    p.add_argument("--runs", type=int, default=3, help="measured runs after the warm-up (>= 3)")
    p.add_argument("--op-repeats", type=int, default=10, help="repeats per op micro-benchmark")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per engine process")
    p.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args(argv)
    args.peers = [n.strip() for n in args.peers.split(",") if n.strip()]
    args.sections = [n.strip() for n in args.sections.split(",") if n.strip()]
    args.engines = [n.strip() for n in args.engines.split(",") if n.strip()]
    if set(args.sections) - set(SECTIONS):
        p.error(f"unknown sections {sorted(set(args.sections) - set(SECTIONS))}; known: {SECTIONS}")
    unknown = set(args.peers) - set(peers.peer_names())
    if unknown:
        p.error(f"unknown peers {sorted(unknown)}; known: {peers.peer_names()}")
    if args.runs < 3:
        p.error("--runs must be >= 3 (figures are medians of at least 3 runs)")
    if args.threads < 1:
        p.error("--threads must be >= 1")
    return args


def main(argv: List[str]) -> int:
    args = parse(argv)
    if args.install_peers:
        status = peers.install(args.peers_venv, args.peers)
        return 0 if all(s["installed"] for s in status.values()) else 1

    os.environ.update({k: v for k, v in worker_env(args.threads).items()
                       if k.startswith(("METALRT_", "OMP_"))})
    import metalrt
    from metalrt.default_model import default_model_path
    from metalrt.loaders import load_model_files

    started = time.time()
    gguf = str(default_model_path())
    # The tokenizer only: the GGUF's weights are dequantized when read, so none are.
    tokenizer = load_model_files(gguf).tokenizer
    result = {
        "quick": args.quick,
        "environment": {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(), "threads": args.threads, "python": platform.python_version(),
            "metal_device": metalrt.device_info("metal")["name"] if metalrt.is_available("metal") else None,
            "load_average_start": load_average(), "model": os.path.basename(gguf),
        },
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = args.out_dir / f"{stamp}.json"

    def save(partial_rows=None):
        """Writes what is measured so far: a long run that is stopped keeps its rows."""
        snapshot = dict(result)
        if partial_rows is not None:
            snapshot["generation_partial"] = partial_rows
            snapshot["generation_sizes"] = dict(QUICK if args.quick else FULL, runs=args.runs)
        path.write_text(json.dumps(snapshot, indent=1))

    seconds = result["environment"]["section_seconds"] = {}
    for name, section in [("generation", lambda: generation(args, gguf, tokenizer,
                                                            QUICK if args.quick else FULL, save)),
                          ("ops", lambda: op_benchmarks(args)),
                          ("counters", lambda: counters(tokenizer, gguf))]:
        if name not in args.sections:
            continue
        start = time.time()
        result[name] = section()
        seconds[name] = round(time.time() - start, 1)
        save()
    result["environment"]["load_average_end"] = load_average()
    result["environment"]["seconds"] = round(time.time() - started, 1)
    result["environment"]["cpu_seconds"] = round(cpu_seconds(), 1)

    save()
    from .report import render
    print(render(result))
    print(f"\nwritten: {path} ({result['environment']['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
