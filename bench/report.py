"""The printed tables of a benchmark result (the JSON written by ``python -m bench``).

    python -m bench.report [bench/results/<timestamp>.json]   # default: the newest run

Printed to a reader that leaves early (``| head -1``), it stops quietly with exit 141
(SIGPIPE_EXIT).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional

from .decode_estimate import PUBLISHED
from .generation import MIN_RUNS

SIM_NOTE = "simulated: not a performance figure"
RESULTS = Path(__file__).resolve().parent / "results"
# 128 + SIGPIPE: what a shell reports for a writer whose reader left (`cat f | head -1`).
SIGPIPE_EXIT = 141


def _num(x: float) -> str:
    """Four significant digits: 117.5, 13.10 and 0.01234 keep their resolution."""
    return f"{x:.4g}"


def _fig(s: Optional[Dict]) -> str:
    if not s:
        return "-"
    if "median" not in s:   # a partial row's runs: too few for a median
        return "runs " + (", ".join(_num(x) for x in s["runs"]) or "-")
    return f"{_num(s['median'])} ({_num(s['min'])}-{_num(s['max'])})"


def _table(header: List[str], rows: List[List[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep] + [line(r) for r in rows])


def _agreement(base: Optional[Dict], row: Dict) -> str:
    """How many of the first greedy ids (prefill token, then decode tokens) of ``row``
    equal metalrt-CPU's before the first difference, e.g. "16/16" or "5/16"."""
    if (not base or row is base or row.get("sizes") or not row.get("greedy_tokens")
            or not base.get("greedy_tokens")):   # row["sizes"]: another prompt (the sim)
        return "-"
    ours, theirs = base["greedy_tokens"], row["greedy_tokens"]
    n = min(len(ours), len(theirs))
    same = next((i for i in range(n) if ours[i] != theirs[i]), n)
    return f"{same}/{n}"


def generation_table(result: Dict) -> str:
    """The generation rows that have figures, then why the comparison columns are
    empty if they are, the rows whose worker stopped part-way (partial) with their
    reason, and one line per row without figures (not installed, failed, not measured
    in this run) with its reason."""
    gen = result["generation"]
    lengths = gen["prompt_lengths"]
    header = (["engine", "version"] + [f"prefill tok/s ({n})" for n in lengths]
              + [f"decode tok/s ({gen['decode_tokens']})", "peak GB", "metalrt-cpu / this",
                 "greedy ids = metalrt-cpu"])
    cpu = next((r for r in gen["rows"] if r.get("engine") == "metalrt"
                and r.get("variant") == "cpu"), None)
    # The comparison columns need metalrt-cpu's medians (a partial row may have none).
    base = cpu if cpu and "median" in (cpu.get("decode_tps") or {}) else None
    rows, partial, without = [], [], []
    for r in gen["rows"]:
        name = f"{r.get('engine')} {r.get('variant')}"
        if not r.get("decode_tps"):
            without.append(f"* {name}: {r.get('reason') or 'no figures'}")
            continue
        try:
            rows.append(_generation_row(r, name, base, lengths))
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
            without.append(f"* {name}: malformed result ({type(e).__name__}: {e})")
            continue
        if r.get("partial"):
            partial.append(f"* {name}: {len(r['decode_tps'].get('runs', []))} of {gen['runs']} "
                           f"runs, then {r.get('reason') or 'stopped'}")
    table = _table(header, rows) if rows else "(no engine was measured)"
    kv = [f"{r.get('engine')} {r.get('variant')} {r['kv_bytes'] / 1e6:.1f} MB"
          for r in gen["rows"] if r.get("kv_bytes")]
    if kv:
        table += "\n\nkv bytes (the KV cache a row's engine holds): " + ", ".join(kv)
    if rows and not base:
        why = ("it is not in this result" if cpu is None else
               f"it has fewer than {MIN_RUNS} runs" if cpu.get("decode_tps") else
               f"it has no figures: {cpu.get('reason') or 'no reason recorded'}")
        table += ("\n\nmetalrt-cpu / this and greedy ids = metalrt-cpu are - in every row: "
                  f"they compare a row with metalrt cpu's medians and ids, and {why}.")
    if partial:
        table += (f"\n\nPartial rows (their worker stopped; figures of the runs it finished, "
                  f"medians only from {MIN_RUNS} runs):\n" + "\n".join(partial))
    if without:
        table += "\n\nRows without figures:\n" + "\n".join(without)
    return table


def _generation_row(r: Dict, name: str, base: Optional[Dict], lengths: List[int]) -> List[str]:
    """One table row of a generation result with figures (raises on a malformed one)."""
    if r.get("sizes"):   # the simulated device runs smaller sizes, said in the label
        sizes = r["sizes"]
        prefill = [f"{_fig(r['prefill_tps'].get(str(n)))} [{n}]" for n in sizes["prompt_lengths"]]
        prefill += ["-"] * (len(lengths) - len(prefill))
        decode = f"{_fig(r['decode_tps'])} [{sizes['decode_tokens']}]"
        name += f" ({SIM_NOTE})"
    else:
        prefill = [_fig(r["prefill_tps"].get(str(n))) for n in lengths]
        decode = _fig(r["decode_tps"])
    ratio = "-"
    if base and r is not base and not r.get("sizes") and "median" in r["decode_tps"]:
        parts = [base["prefill_tps"][str(n)]["median"] / r["prefill_tps"][str(n)]["median"]
                 for n in lengths]
        parts.append(base["decode_tps"]["median"] / r["decode_tps"]["median"])
        ratio = " / ".join(f"{x:.2f}" for x in parts)
    return [name, r.get("version", "")] + prefill + [decode, f"{r['peak_memory_gb']:.2f}", ratio,
                                                     _agreement(base, r)]


def _probe_gbps(result: Dict) -> Optional[float]:
    """The bandwidth probe's best GB/s (bench/bandwidth.py); None in older results."""
    return result["environment"].get("bandwidth", {}).get("gbps")


def op_table(result: Dict) -> str:
    probe = _probe_gbps(result)
    header = ["op", "device", "provider", "ms (min-max)", "GFLOP/s", "GB/s", "% of probe"]
    rows = []
    for r in result["ops"]:
        s = r["seconds"]
        device = r["device"] + (" (sim)" if r.get("simulated") else "")
        share = "-" if probe is None or r.get("simulated") else f"{100 * r['gbps'] / probe:.0f}%"
        rows.append([r["name"], device, r["provider"],
                     f"{s['median'] * 1e3:.3f} ({s['min'] * 1e3:.3f}-{s['max'] * 1e3:.3f})",
                     "-" if r["gflops"] is None else _num(r["gflops"]), _num(r["gbps"]), share])
    return _table(header, rows)


def probe_line(result: Dict) -> Optional[str]:
    """The bandwidth probe's figures: the best and median pass of the run, then each
    probe's (bench/bandwidth.py combine); None in results from before the probe."""
    probe = result["environment"].get("bandwidth")
    if not probe:
        return None
    samples = "".join(f"; {s['when']}: {s['gbps']:.2f} best, {s['gbps_median']:.2f} median"
                      for s in probe.get("samples", []))
    return (f"Memory read-bandwidth probe (bench/bandwidth.py): {probe['gbps']:.2f} GB/s best, "
            f"{probe['gbps_median']:.2f} median, {probe['threads']} threads over {probe['mib']} MiB"
            f"{samples}")


def decode_bandwidth_line(result: Dict) -> Optional[str]:
    """metalrt-cpu's decode as bytes read per second against the probe: decode tok/s x
    the weight bytes a decode step reads (the counters section's count)."""
    probe = _probe_gbps(result)
    step_bytes = result.get("counters", {}).get("decode", {}).get("weight_bytes")
    rows = [r for r in result.get("generation", {}).get("rows", [])
            if r.get("engine") == "metalrt" and r.get("variant") == "cpu" and "decode_tps" in r]
    if probe is None or not step_bytes or not rows:
        return None
    tps = rows[0]["decode_tps"]["median"]
    gbps = tps * step_bytes / 1e9
    return (f"metalrt cpu decode: {tps:.1f} tok/s x {step_bytes / 1e6:.2f} MB of weights per "
            f"token = {gbps:.2f} GB/s, {100 * gbps / probe:.0f}% of the probe's {probe:.2f} GB/s "
            f"({result['environment']['bandwidth']['threads']} threads; goal >= 60%)")


def counter_table(result: Dict) -> str:
    c = result.get("counters")
    if not c or "error" in c:
        return f"Metal-path counters: {c.get('error') if c else 'no Metal device'}"
    header = ["step", "commits (cap/flush/sync)", "host waits", "dispatches", "dispatches/layer",
              "waits/layer", "bytes allocated", "waits outside ops"]

    def commits(s):
        # Results written before the profiler classified commits have no causes.
        if "commits_at_cap" not in s:
            return s["commits"]
        return (f"{s['commits']} ({s['commits_at_cap']}/{s['commits_at_flush']}/"
                f"{s['commits_at_synchronize']})")

    rows = []
    for label, s in [("prefill", c["prefill"])] + [(f"decode (warm-up {i + 1})", s) for i, s in
                                                   enumerate(c["decode_warmup"])] + [("decode", c["decode"])]:
        rows.append([label, commits(s), s["waits"], s["dispatches"], s["dispatches_per_layer"],
                     s["waits_per_layer"], s["allocated_bytes"], s["waits_outside_ops"]])
    goal = c["goal"]
    decode = c["decode"]
    if "commits_at_cap_but_one_synchronize" in goal:
        commit_goal = (f"every commit at the cap but the one synchronize, none at a flush: "
                       f"{goal['commits_at_cap_but_one_synchronize']} ({decode['commits_at_cap']} "
                       f"at the cap, {decode['commits_at_flush']} at a flush, "
                       f"{decode['commits_at_synchronize']} at the synchronize; "
                       f"{decode['dispatches']} dispatches fill {goal['decode_commits_from_cap']} "
                       "command buffers to the cap)")
    else:
        commit_goal = (f"commits only from the cap: {goal['commits_only_from_cap']} "
                       f"({decode['commits']} commits, cap allows {goal['decode_commits_from_cap']})")
    ops_rows = [[n, r["provider"], r["calls"], r["waits"], r["commits"], r["dispatches"]]
                for n, r in c["decode"]["ops"].items()]
    lines = [f"Metal-path counters ({c['device']}; prompt {c['prompt_tokens']} tokens, "
             f"{c['num_layers']} layers, cap {c['max_dispatches_per_command_buffer']} dispatches "
             "per command buffer):",
             _table(header, rows), "",
             "Decode step by op (waits/commits/dispatches made during the op's calls):",
             _table(["op", "provider", "calls", "waits", "commits", "dispatches"], ops_rows), "",
             f"one host wait per decode step: {goal['one_wait_per_decode_step']} "
             f"({decode['waits']} waits); {commit_goal}; 0 bytes after warm-up: "
             f"{goal['zero_bytes_after_warmup']}",
             f"ops on the CPU reference tier: {', '.join(goal['reference_tier_ops']) or 'none'}"]
    if "decode_attention" in c:      # results written before split-KV attention lack it
        lines += ["", f"dispatches per layer <= 8: {goal['dispatches_per_layer_at_most_8']}; "
                  "decode attention (one request, the model's heads; threadgroups per "
                  "(request, kv head) from the profiler, goal >= 16 at 4,096: "
                  f"{goal['decode_attention_16_threadgroups_per_kv_head_at_4096']}):",
                  _table(["context", "kernels (threadgroups)", "threadgroups/kv head", "SIMD-groups",
                          "positions/SIMD-group", "collectives/SIMD-group", "NMSE vs CPU", "max |error|"],
                         [[r["context"], ", ".join(f"{n} ({t})" for n, t in r["kernels"].items()),
                           r["threadgroups_per_kv_head"], r.get("simdgroups", "-"),
                           r.get("positions_per_simdgroup", "-"), r.get("collectives_per_simdgroup", "-"),
                           f"{r['nmse']:.1e}", f"{r['max_abs_error']:.1e}"]
                          for r in c["decode_attention"]])]
    if "argmax_loads_per_thread" in c:   # results written before the two-level argmax lack it
        lines.append(f"decode attention: <= 16 positions and <= 64 collectives per SIMD-group, >= 256 "
                     f"SIMD-groups at 512 positions: {goal['decode_attention_parallel']}; argmax serial "
                     f"loads per thread: {c['argmax_loads_per_thread']} (goal <= 32: "
                     f"{goal['argmax_loads_per_thread_at_most_32']}); busiest SIMD-group's collectives "
                     f"of any dispatch: prefill {c['max_simd_collectives']['prefill']}, decode "
                     f"{c['max_simd_collectives']['decode']}")
    if c.get("file_weight_bytes"):     # results written before weight bytes were counted lack it
        lines.append(f"weight bytes read per decode step: {decode['weight_bytes'] / 1e6:.2f} MB; "
                     f"the file's tensor bytes: {c['file_weight_bytes'] / 1e6:.2f} MB "
                     f"({decode['weight_bytes'] / c['file_weight_bytes']:.3f}x, goal <= 1.05x: "
                     f"{goal['decode_weight_bytes_within_1_05x_file']}); resident weights "
                     f"{c['weight_bytes_resident'] / 1e6:.2f} MB")
    lines += _replayed_lines(c)
    return "\n".join(lines)


def _replayed_lines(c: Dict) -> List[str]:
    """The replayed decode step's host figures and the per-chip estimate (results
    written before decode plans lack both)."""
    lines = []
    r = c.get("replayed_decode")
    if r:
        w, g = r["worst"], r["goal"]
        lines += ["", "Replayed decode step (a recorded plan, next step committed before the "
                  "ids are read; worst of the measured steps):",
                  f"calls into C++ per step: {w['native_calls']} (goal <= 5: "
                  f"{g['native_calls_per_step_at_most_5']}); host waits: {w['waits']} (goal 1: "
                  f"{g['one_wait_per_step']}); commits {w['commits']} ({w['commits_at_cap']}/"
                  f"{w['commits_at_flush']}/{w['commits_at_synchronize']} cap/flush/sync); next "
                  f"step committed before the read: {g['next_step_committed_before_read']}; "
                  f"0 bytes: {g['zero_bytes_after_warmup']}"]
        t = r.get("replay_host_seconds")
        if t:   # results before it was timed lack it
            lines.append(f"host time of a replay (encode and commit, this machine's CPU): median "
                         f"{t['median_s'] * 1e3:.2f} ms, least {t['min_s'] * 1e3:.2f} ms of {t['replays']}")
    contexts = [e for e in c.get("metal_estimate") or () if "chips" in e]   # older results: chip rows
    if contexts:
        chips = [r["chip"] for r in contexts[0]["chips"]]
        lines += ["", f"ESTIMATE, not a measurement (bench/metal_estimate.py): decode tok/s per chip "
                  f"from the step's counted kernels ({contexts[0]['weight_bytes'] / 1e6:.2f} MB of "
                  f"weights) at each context's K/V bytes and attention grid; in brackets the shares "
                  f"of dispatch cost / bytes / serial chains:",
                  _table(["chip", "GB/s x efficiency", "cores"]
                         + [f"{e['context']} pos ({e['dispatches']} disp, {e['kv_bytes'] / 1e6:.1f} MB K/V)"
                            for e in contexts],
                         [[chip, f"{row['bandwidth_gb_s']:g} x {row['efficiency']:.0%}", row["gpu_cores"]]
                          + [_estimate_cell(e["chips"][i]) for e in contexts]
                          for i, (chip, row) in enumerate(zip(chips, contexts[0]["chips"]))])]
    models = c.get("model_estimates")
    if models:
        names = list(dict.fromkeys(m["model"] for m in models))
        contexts = list(dict.fromkeys(m["context"] for m in models))
        cell = {(m["model"], m["context"]): m for m in models}
        lines += ["", "ESTIMATE, not a measurement: metalrt against mlx-lm from the same arithmetic "
                  "(bench/decode_estimate.py; the 1B and 8B scaled from the default model's kernels "
                  "at Q4_K_M, mlx-lm at 4-bit group 64 with bf16 K/V), tok/s metalrt / mlx-lm, beside "
                  "published decode figures (short contexts: compare with the first column):",
                  _table(["model", "chip"] + [f"{n} positions" for n in contexts] + ["published"],
                         [[name, row["chip"]]
                          + [f"{cell[name, n]['metalrt'][i]['estimate_tok_s']:.1f} / "
                             f"{cell[name, n]['mlx_lm'][i]['estimate_tok_s']:.1f}" for n in contexts]
                          + [_published(name, row["chip"])]
                          for name in names for i, row in enumerate(cell[name, contexts[0]]["metalrt"])])]
    return lines


def _published(model: str, chip: str) -> str:
    return "; ".join(f"{what} {tps:g} ({src})" for m, c, what, tps, src in PUBLISHED
                     if m == model and c == chip) or "none found"


def _estimate_cell(row: Dict) -> str:
    return (f"{row['estimate_tok_s']:.0f} ({row['dispatch_share']:.0%}/{row['memory_share']:.0%}/"
            f"{row['chain_share']:.0%})")


def _busy(env: Dict) -> str:
    """Why the run's machine was busy, or "": a 1-minute load average above its CPU
    count at the start or the end, more threads per engine than CPUs, or both."""
    cpus = env.get("cpus")
    causes = []
    for when in ("start", "end"):
        try:
            load = float(str(env.get(f"load_average_{when}", "")).split()[0])
        except (IndexError, ValueError):
            continue
        if cpus and load > cpus:
            causes.append(f"load average {load:.2f} on {cpus} CPUs at the {when}")
            break
    if env.get("threads_exceed_cpus"):
        causes.append(f"--threads {env['threads']} on {cpus} CPUs: the engines' threads "
                      "shared CPUs")
    return "; ".join(causes)


def render(result: Dict) -> str:
    """The printed tables of a result (also of a run stopped during its generation
    section: the rows measured until then)."""
    env = result["environment"]
    threads = env["threads"]
    head = (f"metalrt benchmarks, {env['date']} - {env['machine']}, {threads} "
            f"thread{'s' if threads != 1 else ''}, load average {env['load_average_start']} "
            "at start")
    if "seconds" in env:
        head += (f", {env['load_average_end']} at end; {env['seconds']:.0f} s wall, "
                 f"{env['cpu_seconds']:.0f} s CPU")
    if result["quick"]:
        head += " (--quick: small sizes, not comparable to a full run)"
    parts = [head]
    busy = _busy(env)
    if busy:
        parts.append(f"WARNING: the machine was busy ({busy}): more threads were ready to run "
                     "than there are CPUs, so the times, and the ratios between engines "
                     "measured at different moments, are not reliable. Re-run on an idle "
                     "machine with --threads at most the CPU count.")
    if "generation_partial" in result:   # a stopped run's JSON before "complete" existed
        result = dict(result, complete=False,
                      generation=dict(result["generation_sizes"], rows=result["generation_partial"]))
    if result.get("complete") is False:
        parts.append("(an incomplete run, stopped or still running: the sections and rows "
                     "measured until then)")
    if "generation" in result:
        gen = result["generation"]
        parts += [f"End-to-end generation: median (min-max) of {gen['runs']} runs after a "
                  f"warm-up. prefill tok/s (N): an N-token prompt; decode tok/s (N): N greedy "
                  "tokens after the first prompt; metalrt-cpu / this: the ratios of prefill "
                  "and decode medians (> 1: metalrt on the CPU is faster).",
                  generation_table(result)]
    line = probe_line(result)
    if line:
        parts.append(line)
    line = decode_bandwidth_line(result)
    if line:
        parts.append(line)
    if "ops" in result:
        sim = any(r.get("simulated") for r in result["ops"])
        parts += ["Op micro-benchmarks" + (" (metal (sim) rows are simulation times, not performance figures):"
                                           if sim else ":"),
                  op_table(result)]
    if "counters" in result:
        parts.append(counter_table(result))
    if "sizes" in result:
        from .sizes_report import sizes_tables   # it imports this module's helpers
        parts.append(sizes_tables(result["sizes"]))
    if "context" in result:
        from .context import context_table
        parts.append(context_table(result["context"]))
    if len(parts) == 1:
        parts.append("(no section was measured)")
    return "\n\n".join(parts)


def print_tables(text: str) -> bool:
    """Prints ``text`` on stdout; False when the reader left first (``| head -1``).
    Python ignores SIGPIPE, so the write raises BrokenPipeError; stdout is then pointed
    at /dev/null, or the flush at exit would raise again ("Exception ignored ...")."""
    try:
        print(text, flush=True)
        return True
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return False


def newest_result() -> Optional[Path]:
    runs = sorted(RESULTS.glob("*.json"), key=lambda p: p.stat().st_mtime)
    return runs[-1] if runs else None


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.report",
                                description="Prints the tables of a saved benchmark run.")
    p.add_argument("result", nargs="?", type=Path,
                   help="a JSON written by python -m bench (default: the newest in "
                        f"{RESULTS})")
    args = p.parse_args(argv)
    path = args.result or newest_result()
    if path is None:
        p.error(f"no result given and none in {RESULTS}; run python -m bench first")
    try:
        tables = render(json.loads(path.read_text()))
    except OSError as e:
        p.error(f"cannot read {path}: {e.strerror or e}")
    except (ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError,
            RecursionError) as e:
        p.error(f"{path} is not a result of python -m bench ({type(e).__name__}: {e})")
    return 0 if print_tables(tables) else SIGPIPE_EXIT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
