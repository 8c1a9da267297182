"""python -m bench: metalrt's benchmarks in one sitting (issue 6, DESIGN §8).

    python -m bench [--quick] [--threads N] [--runs N] [--out-dir DIR] ...   # --help
    python -m bench --install-peers [--peers-venv DIR]   # once: the peers' venv

Writes ``bench/results/<UTC timestamp>.json`` and prints the tables:
1. end-to-end generation on the default model (prefill tokens/s for 128- and
   512-token prompts, decode tokens/s for 128 greedy tokens, peak memory) for
   metalrt on the CPU and on Metal, and for each peer installed in the peers' venv
   (transformers + torch fp32/bf16, MLX's CPU build with mlx-lm, llama.cpp through
   llama-cpp-python), each engine in a subprocess with the same prompt ids and
   thread count; a peer that is not installed or fails is a row with its reason;
2. op micro-benchmarks per device (``bench/op_micro.py``);
3. the Metal-path counters of one prefill and one decode step (``bench/counters.py``,
   in a process of its own so that no earlier section's buffer cache shows in them).

On the simulated Metal device the generation row runs smaller sizes and every time
is labelled as a simulation time, not a performance figure. ``--quick`` (the CI
smoke test) shrinks every size; its figures are not comparable to a full run.

The JSON is rewritten after every generation row, so a run that is stopped (Ctrl-C,
SIGTERM, a timeout) keeps what it measured; its running worker is killed with it.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from . import peers
from .generation import RESULT_KEY

ROOT = Path(__file__).resolve().parent.parent
TEXT = ("The history of the city begins with a small settlement of fishermen on the river "
        "bank. Over the centuries it grew into a busy market town, then a harbour, and at "
        "last a capital whose libraries, bridges and gardens drew travellers from far away. ")

FULL = {"prompt_lengths": [128, 512], "decode_tokens": 128}
QUICK = {"prompt_lengths": [16, 64], "decode_tokens": 8}
SIM = {"prompt_lengths": [4], "decode_tokens": 4}         # the simulated Metal device
SECTIONS = ("generation", "ops", "counters")
SIM_QUICK = None                                           # --quick: counters only
MAX_THREADS = 1024            # the runtime's limit (METALRT_CPU_THREADS)
MAX_TIMEOUT = 7 * 24 * 3600   # seconds; subprocess's clock overflows far above


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


def die_with_parent() -> None:
    """In a worker, before exec: the kernel kills it when the bench process dies, even
    by SIGKILL (Linux's PR_SET_PDEATHSIG; elsewhere nothing)."""
    if sys.platform.startswith("linux"):
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG = 1


def last_json_object(stdout: str):
    """The last line of ``stdout`` that is a JSON object holding the worker's result
    (under RESULT_KEY: a library may print other JSON after it), or None."""
    for line in reversed(stdout.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and RESULT_KEY in value:
            return value
    return None


def run_worker(python: str, module: str, spec: Dict, threads: int, timeout: float) -> Dict:
    """Runs ``python -m module SPEC.json`` (a worker that prints its result as a JSON
    line) in a subprocess; its result, or {"reason": ...} with the worker's last words
    when it fails. The worker is killed when this process is stopped."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="metalrt-bench-",
                                     delete=False) as f:
        json.dump(spec, f)
    try:
        # subprocess.run kills the worker on any exception, Stopped included.
        proc = subprocess.run([python, "-m", module, f.name], capture_output=True, text=True,
                              errors="replace", env=worker_env(threads), cwd=ROOT,
                              timeout=timeout, preexec_fn=die_with_parent)
    except subprocess.TimeoutExpired:
        return {"reason": f"failed: no result within {timeout:g} s"}
    except OSError as e:
        return {"reason": f"failed: {python} does not run: {e}"}
    finally:
        os.unlink(f.name)
    result = last_json_object(proc.stdout) if proc.returncode == 0 else None
    result = result.get(RESULT_KEY) if result else None
    if not isinstance(result, dict):
        said = peers.last_words(proc.stderr, 2) or peers.last_words(proc.stdout, 2)
        return {"reason": f"failed (exit {proc.returncode}): {said or 'no result printed'}"}
    return result


def export_hf(python: str, gguf: str, out: Path, threads: int, timeout: float) -> str:
    """Writes the GGUF as a Hugging Face directory (float32 safetensors and
    tokenizer) with the peers' transformers (``bench/export_hf.py``, which keeps an
    export that is current); the transformers and mlx rows load it. "" or the reason
    it could not."""
    print("bench: the Hugging Face export of the GGUF for the peers", file=sys.stderr)
    try:
        proc = subprocess.run([python, "-m", "bench.export_hf", gguf, str(out)],
                              capture_output=True, text=True, errors="replace",
                              env=worker_env(threads), cwd=ROOT, timeout=timeout,
                              preexec_fn=die_with_parent)
    except subprocess.TimeoutExpired:
        return f"could not export the GGUF to a Hugging Face directory within {timeout:g} s"
    if proc.returncode != 0:
        return ("could not export the GGUF to a Hugging Face directory: "
                + peers.last_words(proc.stderr, 2))
    return ""


def engine_rows() -> List[str]:
    """Every generation row's name ("engine variant"), in table order."""
    return ["metalrt cpu", "metalrt metal"] + [f"{p.name} {v}" for p in peers.PEERS
                                               for v in p.variants]


def generation(args, gguf: str, tokenizer, sizes: Dict, save) -> Dict:
    """The generation section; ``save(rows)`` is called after every row."""
    import metalrt

    lengths = sizes["prompt_lengths"]
    rows = []

    def record(row):
        rows.append(row)
        save(rows)

    def spec(engine, variant, s, **extra):
        return {"engine": engine, "variant": variant, "gguf": gguf, "threads": args.threads,
                "runs": args.runs, "prompt_lengths": s["prompt_lengths"],
                "decode_tokens": s["decode_tokens"],
                "prompts": {str(n): prompt_ids(tokenizer, n) for n in s["prompt_lengths"]},
                **extra}

    def add(engine, variant, python, s, simulated=False, **extra):
        row = {"engine": engine, "variant": variant}
        print(f"bench: generation: {engine} {variant}", file=sys.stderr)
        start = time.time()
        row.update(run_worker(python, "bench.generation", spec(engine, variant, s, **extra),
                              args.threads, args.timeout))
        # The worker's wall time, loading included: where a run's minutes go.
        row["worker_seconds"] = round(time.time() - start, 1)
        if simulated:
            row["sizes"] = s
            row["note"] = "simulated: not a performance figure"
        record(row)

    def wanted(engine, variant):
        return not args.engines or f"{engine} {variant}" in args.engines

    def skipped(engine, variant, reason):
        record({"engine": engine, "variant": variant, "reason": reason})

    def not_measured(engine, variant, option):
        skipped(engine, variant, f"not measured in this run ({option})")

    save(rows)
    if wanted("metalrt", "cpu"):
        add("metalrt", "cpu", sys.executable, sizes)
    else:
        not_measured("metalrt", "cpu", "--engines")
    if not wanted("metalrt", "metal"):
        not_measured("metalrt", "metal", "--engines")
    elif not metalrt.is_available("metal"):
        skipped("metalrt", "metal", "no Metal device in this build")
    else:
        simulated = not metalrt.device_info("metal")["name"].startswith("Apple")
        sim_sizes = (SIM if not args.quick else SIM_QUICK) if simulated else sizes
        if sim_sizes:
            add("metalrt", "metal", sys.executable, sim_sizes, simulated=simulated)
        else:
            skipped("metalrt", "metal", "simulated device: skipped by --quick (see the counters)")
    measured = [p for p in peers.PEERS if p.name in args.peers
                and any(wanted(p.name, v) for v in p.variants)]
    checked = peers.with_exporter([p.name for p in measured if p.loads_hf_export]) + \
        [p.name for p in measured]
    available = peers.availability(args.peers_venv, checked, min(args.timeout, 300))
    python = str(peers.python_of(args.peers_venv))
    hf_dir = args.peers_venv / "smollm2-hf-from-gguf"
    export = {}   # the export's outcome ("" or the reason), made once for every peer

    def export_reason() -> str:
        if "reason" not in export:
            export["reason"] = (
                export_hf(python, gguf, hf_dir, args.threads, args.timeout)
                if available[peers.EXPORTER]["available"] else
                f"needs the {peers.EXPORTER} peer to export the GGUF (no safetensors of SmolLM2 "
                f"are reachable from this machine): {peers.install_hint(args.peers_venv, [peers.EXPORTER])}")
        return export["reason"]

    for peer in peers.PEERS:
        if peer not in measured:
            for variant in peer.variants:
                not_measured(peer.name, variant,
                             "--peers" if peer.name not in args.peers else "--engines")
            continue
        state = available[peer.name]
        extra = {}
        if state["available"] and peer.loads_hf_export:
            if export_reason():
                state = {"available": False, "reason": export_reason()}
            extra["hf_dir"] = str(hf_dir)
        for variant in peer.variants:
            if not wanted(peer.name, variant):
                not_measured(peer.name, variant, "--engines")
            elif state["available"]:
                add(peer.name, variant, python, sizes, **extra)
            else:
                skipped(peer.name, variant, state["reason"])
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


def counters(args, tokenizer, gguf: str) -> Dict:
    """The counters, measured in a worker process of their own: in this one, the
    buffer cache of the sections before would serve some of the prefill's
    allocations and change its byte count."""
    import metalrt

    if not metalrt.is_available("metal"):
        return {"error": "no Metal device in this build"}
    print("bench: Metal-path counters", file=sys.stderr)
    result = run_worker(sys.executable, "bench.counters",
                        {"gguf": gguf, "prompt": tokenizer.encode("Once upon a time"),
                         "decode_steps": 3}, args.threads, args.timeout)
    return {"error": result["reason"]} if "reason" in result else result


def parse(argv: List[str]):
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="small sizes for a smoke test (< 3 min on 2 cores without peers)")
    p.add_argument("--install-peers", action="store_true",
                   help="install the peers into --peers-venv, then exit")
    p.add_argument("--peers-venv", type=Path, default=None,
                   help="the peers' venv (default: $METALRT_BENCH_VENV, else bench-peers "
                        "in $METALRT_CACHE_DIR or ~/.cache/metalrt)")
    p.add_argument("--peers", default=",".join(peers.peer_names()),
                   help="comma-separated peers to install or run (default: all)")
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help="comma-separated sections to run (default: all of "
                        f"{', '.join(SECTIONS)})")
    p.add_argument("--engines", default=None,
                   help="comma-separated generation rows to measure, of: "
                        f"{', '.join(engine_rows())} (default: all; the others are rows "
                        "that say so)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help=f"threads for every engine, 1-{MAX_THREADS} (default: all CPUs)")
    p.add_argument("--runs", type=int, default=3,
                   help="measured runs after the warm-up (>= 3, default 3)")
    p.add_argument("--op-repeats", type=int, default=10,
                   help="timed repeats per op micro-benchmark on the CPU and a real GPU (>= 3; "
                        "the simulated device and --quick use 3)")
    p.add_argument("--timeout", type=float, default=1800,
                   help="seconds for each worker process (an engine's generation row, the "
                        "counters, the peers' export) before it counts as failed (default 1800)")
    p.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results",
                   help="where the JSON is written (default: bench/results)")
    args = p.parse_args(argv)
    args.peers = [n.strip() for n in args.peers.split(",") if n.strip()]
    args.sections = [n.strip() for n in args.sections.split(",") if n.strip()]
    if args.engines is not None and not args.engines.replace(",", "").strip():
        p.error("--engines names no row; leave it out to measure every row")
    args.engines = [n.strip() for n in (args.engines or "").split(",") if n.strip()]
    if not args.sections:
        p.error("--sections names no section; leave it out to run every section")
    if set(args.sections) - set(SECTIONS):
        p.error(f"unknown sections {sorted(set(args.sections) - set(SECTIONS))}; known: {SECTIONS}")
    unknown = set(args.peers) - set(peers.peer_names())
    if unknown:
        p.error(f"unknown peers {sorted(unknown)}; known: {peers.peer_names()}")
    unknown = set(args.engines) - set(engine_rows())
    if unknown:
        p.error(f"unknown --engines rows {sorted(unknown)}; known: {', '.join(engine_rows())}")
    if args.runs < 3:
        p.error("--runs must be >= 3 (figures are medians of at least 3 runs)")
    if args.op_repeats < 3:
        p.error("--op-repeats must be >= 3 (figures are medians of at least 3 repeats)")
    if not 1 <= args.threads <= MAX_THREADS:
        p.error(f"--threads must be in 1-{MAX_THREADS}, got {args.threads}")
    if not 0 < args.timeout <= MAX_TIMEOUT:
        p.error(f"--timeout must be in (0, {MAX_TIMEOUT}] seconds, got {args.timeout}")
    excluded = [e for e in args.engines if e.split()[0] not in ("metalrt", *args.peers)]
    if excluded:
        p.error(f"--engines rows {excluded} belong to peers that --peers leaves out")
    # Absolute: the workers run in the repository's root, not in this directory.
    args.peers_venv = (args.peers_venv.expanduser().absolute() if args.peers_venv
                       else peers.default_venv())
    args.out_dir = args.out_dir.expanduser().absolute()
    return args


class Stopped(Exception):
    """SIGTERM arrived: unwinds like Ctrl-C, so the running worker is killed and the
    JSON keeps what was measured."""


def _stop(signum, frame):
    raise Stopped(signal.Signals(signum).name)


def new_result_path(out_dir: Path) -> Path:
    """A new ``<UTC timestamp>.json`` in ``out_dir`` (suffixed -2, -3, ... when a run
    in the same second already took the name). Raises OSError when not writable."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        path = out_dir / (f"{stamp}.json" if n == 1 else f"{stamp}-{n}.json")
        try:
            with open(path, "x"):
                return path
        except FileExistsError:
            continue
    raise OSError(f"no free result name for {stamp} in {out_dir}")


def main(argv: List[str]) -> int:
    args = parse(argv)
    if args.install_peers:
        status = peers.install(args.peers_venv, args.peers)
        return 0 if all(status[n]["installed"] for n in peers.with_exporter(args.peers)) else 1
    try:
        path = new_result_path(args.out_dir)
    except OSError as e:
        print(f"python -m bench: error: cannot write results in {args.out_dir}: {e}",
              file=sys.stderr)
        return 2
    stops = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    saved = []
    try:
        return run(args, path, saved)
    except (KeyboardInterrupt, Stopped) as stop:
        cause = stop if isinstance(stop, Stopped) else "interrupted"
        kept = f"; what was measured is in {path} (python -m bench.report {path})" if saved else ""
        print(f"\nbench: stopped ({cause}){kept}", file=sys.stderr)
        return 130 if isinstance(stop, KeyboardInterrupt) else 143
    except Exception as e:   # before any figure: no model, no device, ... - one line
        if saved:
            raise
        print(f"python -m bench: error: {e}", file=sys.stderr)
        return 1
    finally:
        for s, handler in stops.items():
            signal.signal(s, handler)
        if not saved:
            path.unlink(missing_ok=True)


def run(args, path: Path, saved: List[bool]) -> int:
    """The sections of ``args`` into the JSON at ``path`` (``saved`` gets an entry
    once it holds a result); 0 when every measured row and section has figures."""
    os.environ.update({k: v for k, v in worker_env(args.threads).items()
                       if k.startswith(("METALRT_", "OMP_"))})
    import metalrt
    from metalrt.default_model import default_model_path
    from metalrt.loaders import load_model_files

    started = time.time()
    # Absolute: the workers run in the repository's root.
    gguf = os.path.abspath(default_model_path())
    # The tokenizer only: the GGUF's weights are dequantized when read, so none are.
    tokenizer = load_model_files(gguf).tokenizer
    result = {
        "quick": args.quick,
        "sections": args.sections,
        "environment": {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(), "threads": args.threads, "python": platform.python_version(),
            "metal_device": metalrt.device_info("metal")["name"] if metalrt.is_available("metal") else None,
            "cpus": os.cpu_count(), "load_average_start": load_average(),
            "model": os.path.basename(gguf),
        },
    }

    def save(partial_rows=None):
        """Writes what is measured so far (a long run that is stopped keeps its rows),
        through a temporary file, so a failed write never destroys the last one."""
        snapshot = dict(result)
        if partial_rows is not None:
            snapshot["generation_partial"] = partial_rows
            snapshot["generation_sizes"] = dict(QUICK if args.quick else FULL, runs=args.runs)
        temporary = path.with_name(path.name + ".tmp")
        try:
            temporary.write_text(json.dumps(snapshot, indent=1))
            os.replace(temporary, path)
            saved[:] = [True]
        except OSError as e:
            print(f"bench: warning: could not save {path}: {e}", file=sys.stderr)

    seconds = result["environment"]["section_seconds"] = {}
    save()
    for name, section in [("generation", lambda: generation(args, gguf, tokenizer,
                                                            QUICK if args.quick else FULL, save)),
                          ("ops", lambda: op_benchmarks(args)),
                          ("counters", lambda: counters(args, tokenizer, gguf))]:
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
    failed = [f"{r['engine']} {r['variant']}" for r in result.get("generation", {}).get("rows", [])
              if r.get("reason", "").startswith("failed")]
    failed += ["counters"] if "error" in result.get("counters", {}) else []
    if failed:
        print(f"bench: failed: {', '.join(failed)} (their reasons are in the table)",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
