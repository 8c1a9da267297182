"""Smoke test of the benchmark: ``python -m bench --quick`` runs in one
sitting, writes its JSON with every section, runs a peer worker (transformers fp32,
from a peers' venv that sees this interpreter's torch and transformers) on the
Hugging Face export it writes, reports the peers that are not installed as such (with
a reason) instead of dropping them, every figure it measures is positive, and the
Metal-path counters meet their goals (one host wait per decode step, commits beyond
one only at the dispatch cap, 0 bytes allocated after warm-up, weight bytes read per
decode step within 1.05x of the file's). No speed is asserted."""
import json
import math
import os
import site
import subprocess
import sys
import venv
from pathlib import Path

import metalrt

ROOT = Path(__file__).resolve().parents[2]


def positive(summary):
    return all(summary[k] > 0 and math.isfinite(summary[k]) for k in ("median", "min", "max")) \
        and summary["min"] <= summary["median"] <= summary["max"]


def peers_venv(path: Path) -> Path:
    """A venv whose interpreter also imports this one's packages (torch and
    transformers (and accelerate) of metalrt's test extra; not mlx or llama-cpp-python)."""
    venv.EnvBuilder(with_pip=False).create(path)
    [packages] = list(path.glob("lib/python*/site-packages"))
    (packages / "parent.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return path


def test_quick_benchmark_json(tmp_path):
    out = tmp_path / "results"
    env = dict(os.environ, METALRT_BENCH_VENV=str(peers_venv(tmp_path / "peers")))
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out-dir", str(out),
                           "--engines", "metalrt cpu,metalrt metal,transformers fp32,mlx fp32,llama.cpp q4_1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [path] = list(out.glob("*.json"))
    result = json.loads(path.read_text())
    assert result["quick"] is True
    assert "End-to-end generation" in proc.stdout and "Op micro-benchmarks" in proc.stdout

    gen = result["generation"]
    assert gen["runs"] >= 3
    rows = {(r["engine"], r["variant"]): r for r in gen["rows"]}
    cpu = rows[("metalrt", "cpu")]
    assert cpu["version"].startswith("metalrt ")
    for n in gen["prompt_lengths"]:
        assert positive(cpu["prefill_tps"][str(n)]) and len(cpu["prefill_tps"][str(n)]["runs"]) == gen["runs"]
    assert positive(cpu["decode_tps"]) and cpu["peak_memory_gb"] > 0 and cpu["worker_seconds"] > 0

    peer = rows[("transformers", "fp32")]
    assert peer["version"].startswith("transformers "), peer
    for n in gen["prompt_lengths"]:
        assert positive(peer["prefill_tps"][str(n)])
    assert positive(peer["decode_tps"]) and peer["peak_memory_gb"] > 0
    # Two float32 engines on two independent dequantisations of the GGUF: the same
    # greedy continuation.
    assert peer["greedy_tokens"] == cpu["greedy_tokens"] and len(cpu["greedy_tokens"]) == 9
    assert (tmp_path / "peers" / "smollm2-hf-from-gguf" / "metalrt-export.json").exists()
    assert rows[("transformers", "bf16")]["reason"] == "not measured in this run (--engines)"
    for peer, variant in [("mlx", "fp32"), ("llama.cpp", "q4_1")]:
        assert rows[(peer, variant)]["reason"].startswith("not installed"), rows[(peer, variant)]

    devices = {r["device"] for r in result["ops"]}
    assert devices == {d for d in ("cpu", "metal") if metalrt.is_available(d)}
    for r in result["ops"]:
        assert positive(r["seconds"]) and r["gbps"] > 0 and r["provider"], r
        assert r["gflops"] is None or r["gflops"] > 0
    ops = {r["op"] for r in result["ops"]}
    assert ops == {"matmul_bt", "quantized_matmul_bt", "rms_norm", "paged_attention",
                   "gated_delta_rule", "causal_conv1d"}

    if metalrt.is_available("metal"):
        c = result["counters"]
        for step in [c["prefill"], c["decode"]]:
            assert step["commits"] > 0 and step["waits"] > 0 and step["dispatches"] > 0
            assert step["dispatches_per_layer"] > 0 and step["allocated_bytes"] >= 0
        assert c["decode"]["allocated_bytes"] == 0   # after warm-up (the goal, met)
        assert c["num_layers"] == 30 and c["goal"]["zero_bytes_after_warmup"] is True
        assert c["decode"]["waits"] == 1 and c["goal"]["one_wait_per_decode_step"] is True
        assert c["goal"]["commits_at_cap_but_one_synchronize"] is True
        assert c["goal"]["reference_tier_ops"] == []
        # The default model runs from its Q4_1/Q8_0 blocks: a decode step reads each
        # weight once (the tied Q8_0 embedding whole, as the LM head), about the file's
        # tensor bytes; from float32 it read 5.5x.
        assert c["file_weight_bytes"] == 96_576_768
        assert 0.95 * c["file_weight_bytes"] < c["decode"]["weight_bytes"] <= 1.05 * c["file_weight_bytes"]
        assert c["goal"]["decode_weight_bytes_within_1_05x_file"] is True
