"""python -m bench: metalrt's benchmarks in one sitting, side by side with its peers.

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
SIGTERM, SIGHUP) keeps what it measured (``"complete": false``); its running worker is
killed with it, and a row whose worker fails or times out keeps the runs it finished.
Printed to a reader that leaves early (``| head``), the tables stop quietly: exit 141.
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

from . import bandwidth, context, peers, sizes
from .generation import MIN_RUNS, RESULT_KEY

ROOT = Path(__file__).resolve().parent.parent
TEXT = ("The history of the city begins with a small settlement of fishermen on the river "
        "bank. Over the centuries it grew into a busy market town, then a harbour, and at "
        "last a capital whose libraries, bridges and gardens drew travellers from far away. ")

FULL = {"prompt_lengths": [128, 512], "decode_tokens": 128}
QUICK = {"prompt_lengths": [16, 64], "decode_tokens": 8}
SIM = {"prompt_lengths": [4], "decode_tokens": 4}         # the simulated Metal device
SECTIONS = ("generation", "ops", "counters")
# Run only when named in --sections (minutes to hours, and GBs of model files).
OPTIONAL_SECTIONS = ("sizes", "context")
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


# While a worker starts (run_stoppable), _stop only records the stop signals here.
_worker_starting = False
_held_stops: List[int] = []


def run_stoppable(cmd: List[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, capture_output=True, timeout=timeout, **kwargs) of a worker
    that is killed (and reaped) when this process is stopped, and dies with it
    (die_with_parent). A stop signal that arrives while the worker starts is held
    until the Popen exists: it used to raise Stopped inside subprocess.run's Popen,
    after the fork and before there was a Popen to kill, so the worker was left
    running. (Held by the handler, not the signal mask: the kernel may give a
    process-directed signal to any thread, and Python runs the handler regardless.)"""
    global _worker_starting
    _worker_starting = True
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=die_with_parent, **kwargs)
    except BaseException:
        _worker_starting = False
        _raise_held_stop()
        raise
    with proc:   # waits for the worker on the way out
        try:
            _worker_starting = False
            _raise_held_stop()
            stdout, stderr = proc.communicate(timeout=timeout)
        except BaseException:   # TimeoutExpired keeps the output read so far
            proc.kill()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _raise_held_stop() -> None:
    if _held_stops:
        signum = _held_stops[0]
        _held_stops.clear()
        _stop(signum, None)


def tagged_result(stdout: str):
    """The value under RESULT_KEY in the last line of ``stdout`` that is a JSON object
    holding one (a library may print other JSON after it), or None."""
    for line in reversed(stdout.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and RESULT_KEY in value:
            return value[RESULT_KEY]
    return None


def _failed(reason: str, last) -> Dict:
    """The row of a worker that failed: its reason, plus the figures of the last
    progress line it printed (``"partial": True``: the runs it finished), if any."""
    if isinstance(last, dict) and last.get("partial") is True:
        return dict(last, reason=reason)
    return {"reason": reason}


def run_worker(python: str, module: str, spec: Dict, threads: int, timeout: float) -> Dict:
    """Runs ``python -m module SPEC.json`` (a worker that prints its result as a JSON
    line under RESULT_KEY) in a subprocess; its result. When the worker exits non-zero,
    prints no result or runs past ``timeout`` seconds: {"reason": ...} with its last
    words, and the runs it finished if it printed progress lines (``_failed``). The
    worker is killed when this process is stopped."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="metalrt-bench-",
                                     delete=False) as f:
        json.dump(spec, f)
    try:
        proc = run_stoppable([python, "-m", module, f.name], timeout, text=True,
                             errors="replace", env=worker_env(threads), cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        # The output read until the kill; on POSIX as bytes, even with text=True.
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
        return _failed(f"failed: no result within {timeout:g} s", tagged_result(out or ""))
    except OSError as e:
        return {"reason": f"failed: {python} does not run: {e}"}
    finally:
        os.unlink(f.name)
    result = tagged_result(proc.stdout)
    if proc.returncode == 0 and isinstance(result, dict) and not result.get("partial"):
        return result
    untagged = "\n".join(line for line in proc.stdout.splitlines() if RESULT_KEY not in line)
    said = peers.last_words(proc.stderr, 2) or peers.last_words(untagged, 2)
    return _failed(f"failed (exit {proc.returncode}): {said or 'no result printed'}", result)


def export_hf(python: str, gguf: str, out: Path, threads: int, timeout: float) -> str:
    """Writes the GGUF as a Hugging Face directory (float32 safetensors and
    tokenizer) with the peers' transformers (``bench/export_hf.py``, which keeps an
    export that is current); the transformers and mlx rows load it. "" or the reason
    it could not."""
    print("bench: the Hugging Face export of the GGUF for the peers", file=sys.stderr)
    try:
        proc = run_stoppable([python, "-m", "bench.export_hf", gguf, str(out)], timeout,
                             text=True, errors="replace", env=worker_env(threads), cwd=ROOT)
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
    """The generation section; ``save(section)`` is called with the section as
    measured so far after every row."""
    import metalrt

    section = {"prompt_lengths": sizes["prompt_lengths"], "decode_tokens": sizes["decode_tokens"],
               "runs": args.runs, "rows": []}

    def record(row):
        section["rows"].append(row)
        save(section)

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

    save(section)
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
    return section


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
                        f"{', '.join(SECTIONS)}; also {', '.join(OPTIONAL_SECTIONS)}, "
                        "bench/sizes.py, and context, bench/context.py)")
    p.add_argument("--scaling-threads", default=None,
                   help="sizes section: comma-separated thread counts of the decode scaling "
                        "(default: 1, 2, 4, ... up to the CPUs, and the CPUs)")
    p.add_argument("--sizes-models", default=None,
                   help="sizes section: comma-separated models to measure, of: "
                        f"{', '.join(sizes.model_names())} (default: all)")
    p.add_argument("--sizes-small", action="store_true",
                   help="sizes section: prefill at 128 tokens only and 16 decode tokens (a "
                        "loaded machine; the JSON says small)")
    p.add_argument("--context-lengths", default=",".join(map(str, context.CONTEXTS)),
                   help="context section: comma-separated context lengths to decode at "
                        f"(default {','.join(map(str, context.CONTEXTS))})")
    p.add_argument("--context-prefill", type=int, default=context.PREFILL_CONTEXT,
                   help="context section: the longest fresh fill; longer contexts extend the "
                        f"fill before them (default {context.PREFILL_CONTEXT})")
    p.add_argument("--engines", default=None,
                   help="comma-separated generation rows to measure, of: "
                        f"{', '.join(engine_rows())} (default: all; the others are rows "
                        "that say so)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help=f"threads for every engine, 1-{MAX_THREADS} (default: all CPUs; more "
                        "than the CPUs is allowed, with a warning)")
    p.add_argument("--runs", type=int, default=MIN_RUNS,
                   help=f"measured runs after the warm-up (>= {MIN_RUNS}, default {MIN_RUNS})")
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
    if set(args.sections) - set(SECTIONS + OPTIONAL_SECTIONS):
        p.error(f"unknown sections {sorted(set(args.sections) - set(SECTIONS + OPTIONAL_SECTIONS))}"
                f"; known: {SECTIONS + OPTIONAL_SECTIONS}")
    try:
        args.scaling_threads = ([int(n) for n in args.scaling_threads.split(",") if n.strip()]
                                if args.scaling_threads else sizes.default_scaling_threads())
    except ValueError:
        p.error(f"--scaling-threads must be comma-separated integers, got {args.scaling_threads!r}")
    if not args.scaling_threads or not all(1 <= n <= MAX_THREADS for n in args.scaling_threads):
        p.error(f"--scaling-threads must name counts in 1-{MAX_THREADS}")
    try:
        args.context_lengths = context.parse_contexts(args.context_lengths)
    except ValueError as e:
        p.error(f"--context-lengths: {e}")
    if not 0 < args.context_prefill <= context.MAX_CONTEXT:
        p.error(f"--context-prefill must be in 1-{context.MAX_CONTEXT}, got {args.context_prefill}")
    args.sizes_models = [n.strip() for n in (args.sizes_models or "").split(",") if n.strip()]
    try:
        sizes.selected_models(args.sizes_models)
    except ValueError as e:
        p.error(f"--sizes-models: {e}")
    unknown = set(args.peers) - set(peers.peer_names())
    if unknown:
        p.error(f"unknown peers {sorted(unknown)}; known: {peers.peer_names()}")
    unknown = set(args.engines) - set(engine_rows())
    if unknown:
        p.error(f"unknown --engines rows {sorted(unknown)}; known: {', '.join(engine_rows())}")
    if args.runs < MIN_RUNS:
        p.error(f"--runs must be >= {MIN_RUNS} (figures are medians of at least {MIN_RUNS} runs)")
    if args.op_repeats < 3:
        p.error("--op-repeats must be >= 3 (figures are medians of at least 3 repeats)")
    if not 1 <= args.threads <= MAX_THREADS:
        p.error(f"--threads must be in 1-{MAX_THREADS}, got {args.threads}")
    if threads_exceed_cpus(args.threads) and not args.install_peers:
        print(f"python -m bench: warning: --threads {args.threads} is more than the "
              f"{os.cpu_count()} CPUs: the engines' threads will share CPUs, so the figures "
              "are not comparable with a run of one thread per CPU (the JSON says "
              "threads_exceed_cpus)", file=sys.stderr)
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


def sizes_chart(result: Dict, path: Path) -> None:
    """The sizes chart of ``result`` next to its JSON (``bench/sizes_chart.py``); a warning
    where matplotlib is missing or the section has no figure to plot."""
    from . import sizes_chart as chart
    try:
        out = chart.write([(chart.source_label(result), result)], path.with_suffix(".png"))
        print(f"bench: sizes chart: {out}", file=sys.stderr)
    except ImportError as e:
        print(f"bench: warning: no sizes chart ({e}; pip install 'metalrt[bench]')", file=sys.stderr)
    except ValueError as e:
        print(f"bench: warning: no sizes chart: {e}", file=sys.stderr)


def threads_exceed_cpus(threads: int) -> bool:
    """More threads per engine than the machine has CPUs (allowed, but they share)."""
    return threads > (os.cpu_count() or threads)


class Stopped(Exception):
    """SIGTERM or SIGHUP arrived: unwinds like Ctrl-C, so the running worker is killed
    and the JSON keeps what was measured."""


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _ignore(signum, frame):
    pass


def _stop(signum, frame):
    """The first stop signal unwinds the run; the ones after it go to a handler that
    does nothing, so that a second Ctrl-C or SIGTERM cannot break into the shutdown
    (the worker's kill, the message). Not SIG_IGN yet: signals already delivered and
    waiting for their Python handler would each be reported as "Signal N ignored due
    to race condition" (``main`` sets SIG_IGN once they are handled). While a worker
    starts the signal is only recorded (run_stoppable raises it once the worker can be
    killed)."""
    if _worker_starting:
        _held_stops.append(signum)
        return
    for s in STOP_SIGNALS:
        signal.signal(s, _ignore)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
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
    # Not a signal ignored from the start (nohup's SIGHUP, SIGINT of a background job).
    stops = {s: signal.signal(s, _stop) for s in STOP_SIGNALS
             if signal.getsignal(s) is not signal.SIG_IGN}
    saved = []
    stopped = False
    try:
        return run(args, path, saved)
    except (KeyboardInterrupt, Stopped) as stop:
        stopped = True
        # Ignored until the exit: the interpreter's exit would give a signal with a
        # Python handler its default action back, and SIGTERM's kills. signal.signal
        # first runs the handler (_ignore) of any signal still waiting.
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
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
        if not stopped:
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
    gguf, tokenizer = None, None
    if set(args.sections) & {*SECTIONS, "context"}:   # the sizes section writes its own models
        # Absolute: the workers run in the repository's root.
        gguf = os.path.abspath(default_model_path())
        # The tokenizer only: the GGUF's weights are views of its mapping, none is read.
        tokenizer = load_model_files(gguf).tokenizer
    result = {
        "quick": args.quick,
        "sections": args.sections,
        "complete": False,   # until every section is measured: a stopped run's JSON says so
        "environment": {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(), "threads": args.threads,
            "threads_exceed_cpus": threads_exceed_cpus(args.threads),
            "python": platform.python_version(),
            "metal_device": metalrt.device_info("metal")["name"] if metalrt.is_available("metal") else None,
            "cpus": os.cpu_count(), "load_average_start": load_average(),
            "model": os.path.basename(gguf) if gguf else None,
        },
    }

    def save():
        """Writes what is measured so far (a long run that is stopped keeps its rows),
        through a temporary file, so a failed write never destroys the last one."""
        temporary = path.with_name(path.name + ".tmp")
        try:
            temporary.write_text(json.dumps(result, indent=1))
            os.replace(temporary, path)
            saved[:] = [True]
        except OSError as e:
            print(f"bench: warning: could not save {path}: {e}", file=sys.stderr)

    def save_generation(section):
        result["generation"] = section
        save()

    def save_sizes(section):
        result["sizes"] = section
        save()

    def save_context(section):
        result["context"] = section
        save()

    seconds = result["environment"]["section_seconds"] = {}
    # Before the sections and after the generation, on the same threads as the
    # engines: the decode ceiling (bandwidth.combine: the best pass of both).
    probes = []

    def probe_bandwidth(when: str) -> None:
        print(f"bench: memory read-bandwidth probe on {args.threads} threads ({when})", file=sys.stderr)
        probes.append((when, bandwidth.probe(args.threads)))
        result["environment"]["bandwidth"] = bandwidth.combine(probes)
        save()

    probe_bandwidth("start")
    for name, section in [("generation", lambda: generation(args, gguf, tokenizer,
                                                            QUICK if args.quick else FULL,
                                                            save_generation)),
                          ("ops", lambda: op_benchmarks(args)),
                          ("counters", lambda: counters(args, tokenizer, gguf)),
                          ("sizes", lambda: sizes.run(args, save_sizes, run_worker, prompt_ids)),
                          ("context", lambda: context.run(args, save_context, run_worker, gguf,
                                                          tokenizer, prompt_ids))]:
        if name not in args.sections:
            continue
        start = time.time()
        result[name] = section()
        seconds[name] = round(time.time() - start, 1)
        save()
        if name == "generation":
            probe_bandwidth("after generation")
    result["environment"]["load_average_end"] = load_average()
    result["environment"]["seconds"] = round(time.time() - started, 1)
    result["environment"]["cpu_seconds"] = round(cpu_seconds(), 1)
    result["complete"] = True

    save()
    if "sizes" in result:
        sizes_chart(result, path)
    from .report import SIGPIPE_EXIT, print_tables, render
    shown = print_tables(f"{render(result)}\n\nwritten: {path} "
                         f"({result['environment']['seconds']:.0f} s)")
    failed = [f"{r['engine']} {r['variant']}" for r in result.get("generation", {}).get("rows", [])
              if r.get("reason", "").startswith("failed")]
    failed += ["counters"] if "error" in result.get("counters", {}) else []
    failed += [f"context {r['engine']} {r['kv_type']}" for r in result.get("context", {}).get("rows", [])
               if r.get("reason", "").startswith("failed")]
    if failed:
        print(f"bench: failed: {', '.join(failed)} (their reasons are in the table)",
              file=sys.stderr)
    return 1 if failed else 0 if shown else SIGPIPE_EXIT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
