"""The printed tables of a benchmark result (the JSON written by ``python -m bench``).

    python -m bench.report bench/results/<timestamp>.json   # the tables of a saved run
"""
from __future__ import annotations

import json
import sys
from typing import Dict, List, Optional

SIM_NOTE = "simulated: not a performance figure"


def _fig(s: Optional[Dict]) -> str:
    if not s:
        return "-"
    return f"{s['median']:.1f} ({s['min']:.1f}-{s['max']:.1f})"


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
    gen = result["generation"]
    lengths = gen["prompt_lengths"]
    header = (["engine", "version"] + [f"prefill {n} tok/s" for n in lengths]
              + [f"decode {gen['decode_tokens']} tok/s", "peak GB", "metalrt-cpu / this",
                 "greedy ids = metalrt-cpu"])
    base = next((r for r in gen["rows"] if r["engine"] == "metalrt" and r["variant"] == "cpu"
                 and r.get("decode_tps")), None)
    rows = []
    for r in gen["rows"]:
        name = f"{r['engine']} {r['variant']}"
        if not r.get("decode_tps"):
            rows.append([name, r.get("reason", "")] + ["-"] * (len(header) - 2))
            continue
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
        if base and r is not base and not r.get("sizes"):
            parts = [base["prefill_tps"][str(n)]["median"] / r["prefill_tps"][str(n)]["median"]
                     for n in lengths]
            parts.append(base["decode_tps"]["median"] / r["decode_tps"]["median"])
            ratio = " / ".join(f"{x:.2f}" for x in parts)
        rows.append([name, r["version"]] + prefill + [decode, f"{r['peak_memory_gb']:.2f}", ratio,
                                                      _agreement(base, r)])
    return _table(header, rows)


def op_table(result: Dict) -> str:
    header = ["op", "device", "provider", "ms (min-max)", "GFLOP/s", "GB/s"]
    rows = []
    for r in result["ops"]:
        s = r["seconds"]
        device = r["device"] + (" (sim)" if r.get("simulated") else "")
        rows.append([r["name"], device, r["provider"],
                     f"{s['median'] * 1e3:.3f} ({s['min'] * 1e3:.3f}-{s['max'] * 1e3:.3f})",
                     "-" if r["gflops"] is None else f"{r['gflops']:.2f}", f"{r['gbps']:.2f}"])
    return _table(header, rows)


def counter_table(result: Dict) -> str:
    c = result.get("counters")
    if not c or "error" in c:
        return f"Metal-path counters: {c.get('error') if c else 'no Metal device'}"
    header = ["step", "commits", "host waits", "dispatches", "dispatches/layer", "waits/layer",
              "bytes allocated", "waits outside ops"]
    rows = []
    for label, s in [("prefill", c["prefill"])] + [(f"decode (warm-up {i + 1})", s) for i, s in
                                                   enumerate(c["decode_warmup"])] + [("decode", c["decode"])]:
        rows.append([label, s["commits"], s["waits"], s["dispatches"], s["dispatches_per_layer"],
                     s["waits_per_layer"], s["allocated_bytes"], s["waits_outside_ops"]])
    goal = c["goal"]
    ops_rows = [[n, r["provider"], r["calls"], r["waits"], r["commits"], r["dispatches"]]
                for n, r in c["decode"]["ops"].items()]
    lines = [f"Metal-path counters ({c['device']}; prompt {c['prompt_tokens']} tokens, "
             f"{c['num_layers']} layers, cap {c['max_dispatches_per_command_buffer']} dispatches "
             "per command buffer):",
             _table(header, rows), "",
             "Decode step by op (waits/commits/dispatches made during the op's calls):",
             _table(["op", "provider", "calls", "waits", "commits", "dispatches"], ops_rows), "",
             f"one host wait per decode step: {goal['one_wait_per_decode_step']} "
             f"({c['decode']['waits']} waits); commits only from the cap: "
             f"{goal['commits_only_from_cap']} ({c['decode']['commits']} commits, cap allows "
             f"{goal['decode_commits_from_cap']}); 0 bytes after warm-up: "
             f"{goal['zero_bytes_after_warmup']}",
             f"ops on the CPU reference tier: {', '.join(goal['reference_tier_ops']) or 'none'}"]
    return "\n".join(lines)


def render(result: Dict) -> str:
    env = result["environment"]
    head = (f"metalrt benchmarks, {env['date']} - {env['machine']}, {env['threads']} threads, "
            f"load average {env['load_average_start']} at start")
    if "seconds" in env:
        head += (f", {env['load_average_end']} at end; {env['seconds']:.0f} s wall, "
                 f"{env['cpu_seconds']:.0f} s CPU")
    if result["quick"]:
        head += " (--quick: small sizes, not comparable to a full run)"
    parts = [head]
    if "generation" not in result and result.get("generation_partial"):
        # A run stopped during the generation section: the rows measured until then.
        measured = next(r for r in result["generation_partial"] if r.get("prefill_tps"))
        sizes = result.get("generation_sizes") or {
            "prompt_lengths": sorted(int(n) for n in measured["prefill_tps"]),
            "decode_tokens": measured.get("decode_tokens", 128),
            "runs": len(measured["decode_tps"]["runs"])}
        result = dict(result, generation=dict(sizes, rows=result["generation_partial"]))
        parts.append("(the run was stopped during the generation section: the rows measured "
                     "until then)")
    if "generation" in result:
        parts += [f"End-to-end generation (median (min-max) of {result['generation']['runs']} "
                  "runs after a warm-up; ratios > 1: metalrt on the CPU is faster; prefill / "
                  "decode):", generation_table(result)]
    if "ops" in result:
        parts += ["Op micro-benchmarks:", op_table(result)]
    if "counters" in result:
        parts.append(counter_table(result))
    return "\n\n".join(parts)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(render(json.load(f)))
