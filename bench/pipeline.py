"""python -m bench.pipeline: a model's layers split over Ray actors on this machine
(``metalrt.pipeline``) against one process: prefill and decode tokens/s through the
runner's Engine, the time a token pays for crossing the stages, and each stage's peak
resident set.

    python -m bench.pipeline [--model PATH] [--stages 2] [--batch 4] [--threads 1]

Rows: the whole model in this process (with its decode plans, and op by op as the
stages run), then 1 stage (the whole model in one actor: Ray's cost alone) and
``--stages`` stages with 1 and with ``--batch`` micro-batches a step. Prefill: ``--batch``
prompts of ``--prompt-tokens`` tokens, one token each; decode: ``--batch`` requests of
``--new-tokens`` greedy tokens after a 16-token prompt, timed after their first token,
in wall time and in the CPU time of this process and the stages' (which a machine
shared with other work slows less than the wall time).
Each stage reports VmHWM, its resident set before the model loaded and the bytes of the
model file resident in it. Every process runs ``--threads`` CPU threads. Writes
``bench/results/pipeline-<UTC timestamp>.json`` and prints a table.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

from .__main__ import ROOT, machine, load_average, prompt_ids


def _cpu_seconds(model) -> float:
    """CPU seconds of this process and, for a pipeline, of its stage processes."""
    from metalrt.pipeline import PipelineModel

    return time.process_time() + (model.cpu_seconds() if isinstance(model, PipelineModel)
                                  else 0.0)


def _run(model, tokenizer, prompts, new_tokens: int, decode_plans: bool):
    """Seconds of the first step of ``prompts`` (each to ``new_tokens`` greedy tokens),
    and wall and CPU seconds (``_cpu_seconds``) of the steps after it."""
    from metalrt.runner import Engine, SamplingParams

    engine = Engine(model, model.kv_cache(sum(len(p) + new_tokens for p in prompts) // 16 + 8),
                    max_batched_tokens=sum(len(p) for p in prompts), decode_plans=decode_plans)
    for ids in prompts:
        engine.add_request(ids, SamplingParams(), new_tokens)
    start = time.perf_counter()
    engine.step()
    prefill = time.perf_counter() - start
    cpu = _cpu_seconds(model)
    start = time.perf_counter()
    while engine.has_work:
        engine.step()
    wall = time.perf_counter() - start
    engine.close()
    return prefill, wall, _cpu_seconds(model) - cpu


def measure(model, tokenizer, args, decode_plans: bool) -> dict:
    """prefill and decode tokens/s of ``model`` (the best of ``--runs`` after a warm-up)."""
    long = [prompt_ids(tokenizer, args.prompt_tokens + i) for i in range(args.batch)]
    short = [prompt_ids(tokenizer, 16 + i) for i in range(args.batch)]
    _run(model, tokenizer, short, 4, decode_plans)   # warm-up: buffers, plans, caches
    prefill = min(_run(model, tokenizer, long, 1, decode_plans)[0] for _ in range(args.runs))
    decodes = [_run(model, tokenizer, short, args.new_tokens, decode_plans)[1:]
               for _ in range(args.runs)]
    decode, cpu = min(d[0] for d in decodes), min(d[1] for d in decodes)
    tokens = sum(len(p) for p in long)
    steps = args.new_tokens - 1
    return {"prefill_tok_s": tokens / prefill, "decode_tok_s": args.batch * steps / decode,
            "decode_step_ms": 1e3 * decode / steps, "decode_step_cpu_ms": 1e3 * cpu / steps}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="a .gguf or model directory "
                        "(default: the default model)")
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4, help="requests per step")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per process")
    parser.add_argument("--memory-only", action="store_true",
                        help="only the stages' memory, after one short generation each "
                             "(1 and --stages stages; for a model too slow to time here)")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    # Before Ray starts: its workers inherit this environment.
    os.environ["METALRT_CPU_THREADS"] = str(args.threads)
    import ray

    import metalrt
    from metalrt.pipeline import load_pipeline

    rows = []
    if args.memory_only:
        tokenizer = None
    else:
        model, tokenizer = metalrt.load(args.model, device="cpu")
        rows = [{"row": "1 process, decode plans", **measure(model, tokenizer, args, True)},
                {"row": "1 process, op by op", **measure(model, tokenizer, args, False)}]
        del model
    ray.init(num_cpus=max(os.cpu_count() or 1, args.stages), include_dashboard=False,
             log_to_driver=False)
    stages = []
    try:
        runs = ((1, 1), (args.stages, 1)) if args.memory_only else \
            ((1, 1), (args.stages, 1), (args.stages, args.batch))
        for count, micro in runs:
            pipe, tokenizer = load_pipeline(args.model, count, micro, device="cpu",
                                            cpus_per_stage=args.threads)
            if args.memory_only:
                _run(pipe, tokenizer, [prompt_ids(tokenizer, 16)], 4, False)
            else:
                rows.append({"row": f"{count} stage(s), {micro} micro-batch(es)",
                             **measure(pipe, tokenizer, args, False)})
            if micro == 1:
                stages.append({"stages": count, "memory": pipe.memory()})
            pipe.close()
    finally:
        ray.shutdown()
    for row in rows:
        row["decode_step_overhead_ms"] = row["decode_step_ms"] - rows[1]["decode_step_ms"]
        row["decode_step_cpu_overhead_ms"] = (row["decode_step_cpu_ms"]
                                              - rows[1]["decode_step_cpu_ms"])
    result = {"when": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "machine": machine(), "load_average": load_average(), "args": {
                  k: str(v) for k, v in vars(args).items()}, "rows": rows, "stages": stages}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    (args.out_dir / f"pipeline-{stamp}.json").write_text(json.dumps(result, indent=1))
    print(f"{result['machine']}; load average {result['load_average']}")
    print(f"{'row':36} {'prefill tok/s':>14} {'decode tok/s':>13} {'step ms':>8} "
          f"{'+ms/step':>9} {'CPU ms/step':>12} {'+CPU ms':>8}")
    for r in rows:
        print(f"{r['row']:36} {r['prefill_tok_s']:14.1f} {r['decode_tok_s']:13.1f} "
              f"{r['decode_step_ms']:8.2f} {r['decode_step_overhead_ms']:9.2f} "
              f"{r['decode_step_cpu_ms']:12.2f} {r['decode_step_cpu_overhead_ms']:8.2f}")
    print(f"{'stages':>6} {'layers':>9} {'VmHWM MB':>9} {'before load MB':>15} {'file RSS MB':>12}")
    for entry in stages:
        for m in entry["memory"]:
            print(f"{entry['stages']:6} {str(m['layers']):>9} {m['VmHWM'] / 1e6:9.1f} "
                  f"{m['rss_before_load'] / 1e6:15.1f} {m['file_rss'] / 1e6:12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
