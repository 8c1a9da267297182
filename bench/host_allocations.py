"""Heap allocations (``malloc`` calls and the like) on the replaying thread during each
replay of a steady greedy decode step (``metalrt.plan.Plan.replay``) on the Metal
device, beside the step's dispatches and command-buffer commits (profiler counts).

    python -m bench.host_allocations [--model PATH --prompt IDS] [--steps N]   # one JSON line

The count comes from ``bench/alloc_counter.c``, built here with the system C compiler
into the metalrt cache and preloaded (``LD_PRELOAD``, glibc only) into a fresh
interpreter that runs the steps: it counts only the thread that calls the replay, so
on the simulated device, whose queue thread runs the committed command buffers, the
count is the host's encoding alone. The profiler stays off while allocations are
counted (its rows and events allocate); one further step with it on gives the
dispatches and commits. Deterministic: the counts depend on the model and the code.
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence

SOURCE = Path(__file__).with_name("alloc_counter.c")
PROMPT = [6403, 1980, 253, 655]   # "Once upon a time"
WARMUP_STEPS = 4   # after the prefill: both phases' recordings, then a replay of each


def counter_library() -> Path:
    """The counter's shared library, compiled once per source version into the metalrt
    cache (RuntimeError without a C compiler)."""
    from metalrt.default_model import cache_dir
    source = SOURCE.read_bytes()
    target = cache_dir() / "alloc-counter" / f"{hashlib.sha256(source).hexdigest()[:16]}.so"
    if target.exists():
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise RuntimeError("[host_allocations] no C compiler (cc, gcc or $CC) to build the counter")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".so", delete=False) as tmp:
        partial = Path(tmp.name)
    try:
        subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(partial), str(SOURCE)],
                       check=True, capture_output=True, text=True)
        partial.replace(target)   # atomic: a concurrent build never sees half a library
    except subprocess.CalledProcessError as e:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"[host_allocations] building the counter failed: {e.stderr}") from e
    return target


def run(model_path: Optional[str] = None, prompt_ids: Sequence[int] = PROMPT, steps: int = 3,
        timeout: float = 600) -> Dict:
    """Measures ``steps`` steady decode steps after ``prompt_ids`` of the default model
    (or the model at ``model_path``) in a fresh interpreter with the counter preloaded;
    returns what :func:`measure` returns."""
    env = dict(os.environ, LD_PRELOAD=str(counter_library()))
    argv = [sys.executable, "-m", "bench.host_allocations", "--steps", str(steps), "--preloaded",
            "--prompt", ",".join(str(int(t)) for t in prompt_ids)]
    if model_path:
        argv += ["--model", str(model_path)]
    done = subprocess.run(argv, cwd=Path(__file__).resolve().parent.parent, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"[host_allocations] the measuring process failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(model, prompt_ids: Sequence[int], steps: int) -> Dict:
    """Runs greedy decode steps of ``model`` (Metal) in this process, which must have
    the counter preloaded, and counts each replay's allocations after the prefill and
    WARMUP_STEPS warm-up steps. Returns {"allocations": per steady replay,
    "dispatches", "commits": of one steady step, "calibration": the count of an empty
    start/stop pair}."""
    from metalrt import profiler

    from . import decode_pipeline

    lib = ctypes.CDLL(os.environ["LD_PRELOAD"])
    lib.metalrt_alloc_count_stop.restype = ctypes.c_long
    start, stop = lib.metalrt_alloc_count_start, lib.metalrt_alloc_count_stop
    counts: List[int] = []

    def counted(self):
        replay = self._native.replay   # looked up before the count starts
        start()
        try:
            replay()
        finally:
            counts.append(stop())

    start()
    calibration = stop()
    with decode_pipeline.steady_replays(model, prompt_ids, steps + 1, WARMUP_STEPS, counted) as engine:
        counts.clear()
        for _ in range(steps):
            engine.step()
        steady = list(counts)
        profiler.enable(True)
        profiler.reset()
        engine.step()
        total = next(r for r in profiler.rows() if r["name"] == "total")
        profiler.reset()
    return {"allocations": steady, "dispatches": total["dispatches"], "commits": total["commits"],
            "calibration": calibration}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.host_allocations",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a model path metalrt.load takes (default: the default model)")
    parser.add_argument("--prompt", default=",".join(map(str, PROMPT)),
                        help="comma-separated prompt token ids (default: 'Once upon a time')")
    parser.add_argument("--steps", type=int, default=3, help="steady steps measured (>= 1)")
    parser.add_argument("--preloaded", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    try:
        prompt_ids = [int(t) for t in args.prompt.split(",")]
    except ValueError:
        parser.error(f"--prompt takes comma-separated token ids, got {args.prompt!r}")
    if not args.preloaded:
        print(json.dumps(run(args.model, prompt_ids, args.steps)))
        return 0
    import metalrt
    model, _ = metalrt.load(args.model, device="metal") if args.model else metalrt.load(device="metal")
    print(json.dumps(measure(model, prompt_ids, args.steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
