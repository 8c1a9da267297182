"""The printed tables of the sizes section (``bench/sizes.py``) of a benchmark result."""
from __future__ import annotations

from typing import Dict, List

from .report import _fig as fig, _num as num, _table as table


def sizes_tables(section: Dict) -> str:
    """The full table at the main thread count, the decode scaling, the greedy-id
    agreement and the scaled 48-layer MoE figures."""
    main = section["main_threads"]
    # Results of the first run kept the worker's wording ("16 (METALRT_CPU_THREADS)").
    section = dict(section, rows=[dict(r, threads=int(str(r["threads"]).split()[0]))
                                  for r in section["rows"]])
    models = section["models"]
    probes = section.get("probes", {})
    lengths = section["full"]["prompt_lengths"]
    parts = [f"Sizes (bench/sizes.py): released shapes, random weights; median (min-max) of "
             f"{section['runs']} runs after a warm-up, {section['full']['decode_tokens']} decode "
             f"tokens; bytes/token: the weights a decode token reads; share: decode GB/s over "
             f"the probe at the same threads."]
    header = ["model", "engine", *[f"prefill tok/s ({n})" for n in lengths], "decode tok/s",
              "peak RSS GB", "bytes/token GB", "decode GB/s", "share", "vs llama.cpp"]
    rows = []
    decode = {(r["model"], r["threads"], r["engine"]): r["decode_tps"]["median"]
              for r in section["rows"] if "median" in (r.get("decode_tps") or {})}
    for r in section["rows"]:
        if r["threads"] != main:
            continue
        name = f"{r['engine']} {r['variant']}"
        if "reason" in r and "decode_tps" not in r:
            rows.append([r["model"], name, r["reason"][:80], *[""] * (len(header) - 3)])
            continue
        peer = decode.get((r["model"], main, "llama.cpp"))
        ratio = (f"{decode[(r['model'], main, r['engine'])] / peer:.2f}x"
                 if peer and (r["model"], main, r["engine"]) in decode and r["engine"] != "llama.cpp"
                 else "")
        rows.append([r["model"], name, *[fig(r.get("prefill_tps", {}).get(str(n))) for n in lengths],
                     fig(r.get("decode_tps")), num(r.get("peak_memory_gb", 0)),
                     num(models[r["model"]]["bytes_per_token"] / 1e9),
                     num(r["decode_gbps"]) if "decode_gbps" in r else "-",
                     f"{r['probe_share']:.0%}" if "probe_share" in r else "-", ratio])
    parts.append(f"At {main} threads:\n" + table(header, rows))
    threads = section["threads"]
    if len(threads) > 1:
        keys = sorted({(r["model"], r["engine"]) for r in section["rows"] if r["engine"] != "transformers"},
                      key=lambda k: (list(models).index(k[0]), k[1]))
        rows = [[m, e, *[num(decode[(m, t, e)]) if (m, t, e) in decode else "-" for t in threads]]
                for m, e in keys]
        parts.append("Decode tok/s by threads (prompt of "
                     f"{section['scaling']['prompt_lengths'][0]} tokens, {section['scaling']['decode_tokens']}"
                     " greedy tokens; the main count from the full table):\n"
                     + table(["model", "engine", *[f"{t} thr" for t in threads]], rows))
    if probes:
        parts.append("Bandwidth probe, best pass (GB/s): " + ", ".join(
            f"{t} threads {p['gbps']:.1f} (median {p['gbps_median']:.1f})" for t, p in probes.items()))
    agreement = section.get("agreement", [])
    if agreement:
        parts.append("Greedy ids, metalrt vs llama.cpp, leading ids equal: " + "; ".join(
            f"{a['model']} @{a['threads']}: {a['agree']}/{a['of']}" for a in agreement))
    scaled: List[Dict] = section.get("scaled", [])
    if scaled:
        parts.append("Qwen3-30B-A3B at 48 layers, scaled from the cuts (step = fixed + 48 x per layer): "
                     + "; ".join(f"{s['engine']} @{s['threads']}: {s['decode_tps_scaled']:.2f} tok/s "
                                 f"({s['per_layer_ms']:.2f} ms/layer, {s['fixed_ms']:.1f} ms fixed)"
                                 if s["decode_tps_scaled"] > 0 else
                                 f"{s['engine']} @{s['threads']}: none (the 8-layer cut was the faster)"
                                 for s in scaled))
    return "\n\n".join(parts)
