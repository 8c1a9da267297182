"""The sizes chart: one PNG of two panels from sizes-section result files (``bench/sizes.py``).

Left: decode tok/s against the weight bytes a decode token reads, one marker per engine and
result file at its main thread count, with each file's bandwidth roofline (probe GB/s /
bytes per token); per chip the bytes at the bandwidth llama.cpp achieves there, from
``bench/metal_estimate.py`` (an estimate,
never a measurement) and published llama.cpp / mlx-lm decode figures on Apple chips
(PUBLISHED; cited in docs/benchmarks.md). Right: decode tok/s against threads per model
and engine, one curve per result file.

    python -m bench.sizes_chart OUT.png RESULT.json [RESULT.json ...]

needs matplotlib (the ``bench`` extra). ``python -m bench --sections sizes`` writes the
chart of its own run next to its JSON.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from . import metal_estimate, shapes_gguf
from .sizes import decode_weight_bytes


def _bytes(key: str) -> float:
    return decode_weight_bytes(shapes_gguf.SHAPES[key], "q4_k_m") / 1e9


# Published decode (tg) figures on Apple GPUs: (engine, chip, model, GB a token reads, tok/s).
# Llama-2-7B Q4_0: the file's 3.82 GB (llama.cpp discussion #4167). The others: the Q4_K_M
# bytes of the same released shape (decode_weight_bytes); mlx-lm's 4-bit reads 5-10% fewer.
PUBLISHED = (
    ("llama.cpp", "M1", "Llama-2-7B Q4_0", 3.82, 14.15),
    ("llama.cpp", "M2", "Llama-2-7B Q4_0", 3.82, 21.91),
    ("llama.cpp", "M3 Pro", "Llama-2-7B Q4_0", 3.82, 30.74),
    ("llama.cpp", "M4 Max", "Llama-2-7B Q4_0", 3.82, 83.06),
    ("llama.cpp", "M1 Max", "Llama-3.1-8B Q4_K_M", _bytes("llama-3.1-8b"), 46.2),
    ("llama.cpp", "M4", "Llama-3.1-8B Q4_K_M", _bytes("llama-3.1-8b"), 20.9),
    ("mlx-lm", "M4 Max", "Qwen3-30B-A3B 4-bit", _bytes("qwen3-30b-a3b"), 113.3),
)
ENGINE_MARKERS = {"metalrt": "o", "llama.cpp": "s", "transformers": "^"}


def _need(obj: Dict, keys: Sequence[str], where: str) -> None:
    missing = [k for k in keys if k not in obj]
    if missing:
        raise ValueError(f"sizes chart: {where} lacks {', '.join(missing)}")


def _threads(value) -> int:
    # The first result files kept the worker's wording ("16 (METALRT_CPU_THREADS)").
    return int(str(value).split()[0])


def source_label(result: Dict) -> str:
    """``N cores, load L`` of a result's environment (the load average at its start)."""
    env = result.get("environment", {})
    load = str(env.get("load_average_start", "")).split()
    return f"{env.get('cpus', '?')} cores" + (f", load {load[0]}" if load else "")


def series(result: Dict) -> Dict:
    """The plotted data of one result: ``points`` [(engine variant, model, GB/token, tok/s)]
    at the main thread count (measured rows and the scaled 48-layer MoE rows), ``roofline_gbps``
    (the probe at the main count, or None), ``scaling`` {(model, engine): [(threads, tok/s)]}.
    Raises ValueError naming the field a result lacks."""
    _need(result, ["sizes"], "the result")
    section = result["sizes"]
    _need(section, ["models", "rows", "main_threads"], "the sizes section")
    main = _threads(section["main_threads"])
    for name, model in section["models"].items():
        _need(model, ["bytes_per_token"], f"model {name!r}")
    points, scaling = [], {}
    for i, row in enumerate(section["rows"]):
        _need(row, ["model", "engine", "threads"], f"row {i}")
        decode = (row.get("decode_tps") or {}).get("median")
        if decode is None:
            continue   # a row that says why it has no figure
        if row["model"] not in section["models"]:
            raise ValueError(f"sizes chart: row {i}'s model {row['model']!r} is not in models")
        threads = _threads(row["threads"])
        scaling.setdefault((row["model"], row["engine"]), []).append((threads, decode))
        if threads == main:
            points.append((f"{row['engine']} {row.get('variant', '')}".strip(), row["model"],
                           section["models"][row["model"]]["bytes_per_token"] / 1e9, decode))
    for i, row in enumerate(section.get("scaled", [])):
        _need(row, ["model", "engine", "threads", "decode_tps_scaled", "bytes_per_token"],
              f"scaled row {i}")
        # A non-positive figure (a noisy run's cuts, kept by older runs) is no point.
        if _threads(row["threads"]) == main and row["decode_tps_scaled"] > 0:
            points.append((f"{row['engine']} (48 layers, scaled)", row["model"], row["bytes_per_token"] / 1e9,
                           row["decode_tps_scaled"]))
    probe = section.get("probes", {}).get(str(main))
    if probe is not None:
        _need(probe, ["gbps"], f"the {main}-thread probe")
    return {"main_threads": main, "points": points, "scaling": {k: sorted(v) for k, v in scaling.items()},
            "roofline_gbps": probe["gbps"] if probe else None}


def render(results: List[Tuple[str, Dict]]):
    """The figure of ``results`` [(label, result)]; raises ValueError as ``series`` does
    or for no results. Line labels: ``<engine> - <label>`` (measured, left),
    ``roofline - <label>``, ``<model> <engine> - <label>`` (right); the Metal estimate lines'
    gid is ``Metal estimate <chip>``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    if not results:
        raise ValueError("sizes chart: no result files")
    data = [(label, series(result)) for label, result in results]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 7.5))
    xs = [p[2] for _, d in data for p in d["points"]] + [p[3] for p in PUBLISHED]
    grid = np.geomspace(min(xs) / 1.5, max(xs) * 1.5, 50)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for n, (label, d) in enumerate(data):
        color = colors[n % len(colors)]
        if d["roofline_gbps"]:
            left.plot(grid, d["roofline_gbps"] / grid, "--", color=color, lw=1,
                      label=f"roofline - {label} ({d['roofline_gbps']:.0f} GB/s, "
                            f"{d['main_threads']} thr)")
        for engine in sorted({p[0] for p in d["points"]}):
            mine = [p for p in d["points"] if p[0] == engine]
            left.plot([p[2] for p in mine], [p[3] for p in mine], ENGINE_MARKERS.get(engine.split()[0], "x"),
                      color=color, ms=7, mfc="none" if "llama" in engine else color,
                      label=f"{engine} - {label}")
        for (model, engine), curve in d["scaling"].items():
            right.plot([t for t, _ in curve], [v for _, v in curve],
                       ENGINE_MARKERS.get(engine, "x") + ("--" if engine != "metalrt" else "-"),
                       label=f"{model} {engine} - {label}")
    # Bytes at the achieved bandwidth only (no dispatch count is known at these shapes):
    # an upper bound.
    estimates = [metal_estimate.estimate(int(x * 1e9), 0) for x in grid]
    for i, chip in enumerate(metal_estimate.CHIPS):
        left.plot(grid, [rows[i]["bandwidth_tok_s"] for rows in estimates], ":", color="grey",
                  lw=0.8, gid=f"Metal estimate {chip.name}",
                  label="Metal estimate per chip (achieved bandwidth / bytes; not measured)"
                  if i == 0 else None)
        left.annotate(f"Metal estimate {chip.name}",
                      (grid[0], chip.bandwidth_gb_s * chip.efficiency / grid[0]),
                      fontsize=7, color="grey", ha="left", va="bottom")
    for engine, marker in (("llama.cpp", "P"), ("mlx-lm", "*")):
        mine = [p for p in PUBLISHED if p[0] == engine]
        left.plot([p[3] for p in mine], [p[4] for p in mine], marker, color="black", ms=8,
                  label=f"published {engine} (Metal, Apple chips)")
        for _, chip, model, gb, tps in mine:
            left.annotate(f"{chip} {model}", (gb, tps), fontsize=6, xytext=(4, 2),
                          textcoords="offset points")
    left.set(xscale="log", yscale="log", xlabel="weight GB a decode token reads",
             ylabel="decode tok/s", title="Decode vs bytes per token (dotted: Metal roofline per "
             "chip, an estimate)")
    left.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    left.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    right.set(xscale="log", yscale="log", xlabel="threads", ylabel="decode tok/s",
              title="Thread scaling (decode)")
    right.set_xticks(sorted({t for _, d in data for c in d["scaling"].values() for t, _ in c}))
    right.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    for ax in (left, right):
        ax.grid(True, which="both", lw=0.3)
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    fig.tight_layout()
    return fig


def write(results: List[Tuple[str, Dict]], out: Path) -> Path:
    """Renders ``results`` into the PNG ``out``."""
    import matplotlib.pyplot as plt
    fig = render(results)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


def main(argv: List[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m bench.sizes_chart OUT.png RESULT.json [RESULT.json ...]", file=sys.stderr)
        return 2
    results = []
    for path in argv[1:]:
        result = json.loads(Path(path).read_text())
        results.append((source_label(result), result))
    try:
        print(write(results, Path(argv[0])))
    except ValueError as e:
        print(f"python -m bench.sizes_chart: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
