"""The bench's Metal decode estimate (bench/metal_estimate.py, bench/decode_estimate.py):
bytes at each chip's achieved bandwidth, the dispatch cost and the serial chains of small
grids, printed as an estimate, never as a measurement, and
the replayed-step goals bench/decode_pipeline.py checks in the profiler's event log."""
import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository's bench/
from bench import decode_estimate, decode_pipeline, metal_estimate, report, shapes_gguf  # noqa: E402


M2_EFFICIENCY = 21.91 * 3.56 * 2 ** 30 / 100e9    # llama.cpp #4167's 7B Q4_0 decode on an M2


def test_estimate_is_bytes_at_the_achieved_bandwidth_plus_dispatch_cost():
    rows = {r["chip"]: r for r in metal_estimate.estimate(100_000_000, 454)}
    assert list(rows) == ["M1", "M2", "M3 Pro", "M4 Max"]
    m2 = rows["M2"]
    assert (m2["bandwidth_gb_s"], m2["gpu_cores"], m2["per_dispatch_us"]) == (100.0, 10, 5.16)
    assert m2["efficiency"] == pytest.approx(M2_EFFICIENCY) and 0.83 < M2_EFFICIENCY < 0.84
    assert rows["M4 Max"]["efficiency"] == pytest.approx(83.06 * 3.56 * 2 ** 30 / 546e9)   # 58 %
    assert m2["roofline_tok_s"] == pytest.approx(1000.0)
    assert m2["bandwidth_tok_s"] == pytest.approx(1000.0 * M2_EFFICIENCY)
    # 1 ms of traffic at 100 GB/s, slowed to the achieved share, + 454 x 5.16 us.
    step = 1e-3 / M2_EFFICIENCY + 454 * 5.16e-6
    assert m2["estimate_tok_s"] == pytest.approx(1 / step)
    assert m2["dispatch_share"] == pytest.approx(454 * 5.16e-6 / step) and m2["chain_share"] == 0
    assert rows["M4 Max"]["estimate_tok_s"] > m2["estimate_tok_s"] > rows["M1"]["estimate_tok_s"]
    # K/V bytes add to the traffic like weights.
    with_kv = {r["chip"]: r for r in metal_estimate.estimate(60_000_000, 454, kv_bytes=40_000_000)}
    assert with_kv["M2"]["estimate_tok_s"] == pytest.approx(m2["estimate_tok_s"])


def test_a_small_grid_costs_its_serial_chain_in_waves():
    # 81 threadgroups of 1,024 threads, one resident per core: ceil(81 / cores) waves.
    chain = metal_estimate.Kernel("chain", 1, 81, 1024, 1_000, 100)
    rows = {r["chip"]: r for r in metal_estimate.estimate(1_000, 1, kernels=[chain])}
    for chip, waves in (("M1", 11), ("M2", 9), ("M4 Max", 3)):
        step = 5.16e-6 + waves * 100 * metal_estimate.DEPENDENT_STEP_SECONDS
        assert rows[chip]["estimate_tok_s"] == pytest.approx(1 / step), chip
        assert rows[chip]["chain_share"] > 0.9 and rows[chip]["memory_share"] == 0
    # 80 threadgroups of 128 threads: 8 resident a core, one wave on an M2.
    wide = metal_estimate.Kernel("wide", 1, 80, 128, 1_000, 100)
    m2 = metal_estimate.estimate(1_000, 1, kernels=[wide])[1]
    assert m2["estimate_tok_s"] == pytest.approx(1 / (5.16e-6 + 100 * 0.55e-6))
    # A bandwidth-bound kernel pays its bytes, not its chain.
    gemv = metal_estimate.Kernel("gemv", 2, 240, 64, 2_000_000, 4)
    m2 = metal_estimate.estimate(2_000_000, 3, kernels=[gemv])[1]
    assert m2["estimate_tok_s"] == pytest.approx(1 / (3 * 5.16e-6 + 2e-5 / M2_EFFICIENCY))


def test_estimate_rejects_bad_input():
    with pytest.raises(ValueError, match="bytes_per_step > 0"):
        metal_estimate.estimate(0, 10)
    with pytest.raises(ValueError, match="kv_bytes >= 0"):
        metal_estimate.estimate(10, 10, kv_bytes=-1)
    with pytest.raises(ValueError, match="more dispatches or bytes"):
        metal_estimate.estimate(10, 1, kernels=[metal_estimate.Kernel("k", 2, 2, 32, 1, 1)])
    with pytest.raises(TypeError, match="Kernel rows"):
        metal_estimate.estimate(10, 1, kernels=[{"dispatches": 1}])


def _profile():
    """A decode step's kernel rows as counters records them (2 layers)."""
    def row(dispatches, tgs, threads, collectives, nbytes):
        return {"dispatches": dispatches, "threadgroups": tgs, "last_threads_per_threadgroup": threads,
                "max_simd_collectives": collectives, "weight_bytes": nbytes}
    return {"rms_norm_row_f32": row(5, 5, 256, 1, 0),
            "quantized_matmul_bt_gemv16_q4_1_f32": row(8, 960, 64, 4, 4_000_000),
            "paged_attention_decode_f32": row(2, 2, 1024, 5, 0),
            "greedy_argmax_row_f32": row(1, 12, 256, 2, 0)}


def test_decode_estimate_puts_the_context_into_the_attention_kernel():
    att = {"context": 512, "positions_per_simdgroup": 16,
           "grids": {"paged_attention_decode_f32": {"dispatches": 1, "threadgroups": 9,
                                                    "last_threads_per_threadgroup": 1024,
                                                    "max_simd_collectives": 5}}}
    kernels = decode_estimate.metalrt_kernels(_profile(), att, 2, 1_000, 49152)
    by = {k.name: k for k in kernels}
    assert by["paged_attention_decode_f32"] == metal_estimate.Kernel(
        "paged_attention_decode_f32", 2, 18, 1024, 512_000, 16)
    assert by["greedy_argmax_row_f32"].serial_steps == 16      # 49,152 / (12 x 256)
    assert by["quantized_matmul_bt_gemv16_q4_1_f32"].serial_steps == 4
    (est,) = decode_estimate.metalrt_estimate(_profile(), [att], 2, 1_000, 49152)
    assert (est["weight_bytes"], est["kv_bytes"], est["dispatches"]) == (4_000_000, 512_000, 16)
    assert est["chips"] == metal_estimate.estimate(4_000_000, 16, 512_000, kernels)


def _chip(name):
    return next(c for c in metal_estimate.CHIPS + metal_estimate.CHECK_CHIPS if c.name == name)


def test_mlx_lm_step_is_12_epochs_a_layer_at_4_5_bits_with_bf16_kv():
    shape = decode_estimate.SMOLLM2_135M
    ks = decode_estimate.mlx_lm_kernels(shape, 512, _chip("M2"))
    assert sum(k.dispatches for k in ks) == 12 * 30 + 6
    # Weights: 30 x (q|k|v 960 x 576 + o 576 x 576 + gate|up|down 3 x 1536 x 576) + the
    # 49,152 x 576 head, at 4.5 bits; K/V: 30 layers x 512 x 2 x 3 x 64 x 2 bytes.
    weights = (30 * (960 * 576 + 576 * 576 + 3 * 1536 * 576) + 49152 * 576) * 4.5 / 8
    kv = 30 * 512 * 2 * 3 * 64 * 2
    assert sum(k.bytes for k in ks) == pytest.approx(weights + kv, abs=8)
    att = {k.name: k for k in ks}
    # One pass at 512 positions: a 1,024-thread threadgroup per query head, 16 positions a SIMD-group.
    assert att["sdpa_vector"] == metal_estimate.Kernel("sdpa_vector", 30, 270, 1024, kv, 16)
    # Two passes at 4,096: 32 blocks of 8 SIMD-groups on an M2 (grouped heads), 64 on an M4 Max.
    m2 = {k.name: k for k in decode_estimate.mlx_lm_kernels(shape, 4096, _chip("M2"))}
    assert (m2["sdpa_vector_2pass_1"].threadgroups, m2["sdpa_vector_2pass_1"].serial_steps) == (30 * 9 * 32, 16)
    big = {k.name: k for k in decode_estimate.mlx_lm_kernels(shape, 4096, _chip("M4 Max"))}
    assert (big["sdpa_vector_2pass_1"].threadgroups, big["sdpa_vector_2pass_1"].serial_steps) == (30 * 9 * 64, 8)
    assert "sdpa_vector_2pass_2" in big and "sdpa_vector" not in big


def test_scaled_kernels_read_the_target_files_tensors():
    att = {"context": 512, "positions_per_simdgroup": 16,
           "grids": {"paged_attention_decode_f32": {"dispatches": 1, "threadgroups": 9,
                                                    "last_threads_per_threadgroup": 1024,
                                                    "max_simd_collectives": 20}}}
    profile = _profile()
    profile["quantized_matmul_bt_gemv16_q4_1_f32"]["dispatches"] = 1   # the LM head
    base = dataclasses.replace(decode_estimate.SMOLLM2_135M, layers=2)
    target = shapes_gguf.SHAPES["llama-3.1-8b"]
    ks = {k.name: k for k in decode_estimate.scaled_kernels(profile, att, base, target)}
    # The untied Q6_K head, 128,256 x 4,096 at 210 bytes a 256-block; its grid: rows / 8.
    head = ks["quantized_matmul_bt_gemv16_q4_1_f32"]
    assert (head.bytes, head.threadgroups) == (128256 * 4096 // 256 * 210, 960 * 128256 // 49152)
    # 5 norms over 2 layers = 2 a layer + 1: 65 over 32 layers, f32 weights of 4,096.
    assert (ks["rms_norm_row_f32"].dispatches, ks["rms_norm_row_f32"].bytes) == (65, 65 * 4096 * 4)
    argmax = ks["greedy_argmax_row_f32"]
    assert (argmax.threadgroups, argmax.serial_steps) == (32, 16)   # ceil(128,256 / 4,096) chunks
    # Attention: a threadgroup per query head, 8 kv heads x 128 of f32 K and V per position.
    attn = ks["paged_attention_decode_f32"]
    assert (attn.dispatches, attn.threadgroups, attn.serial_steps) == (32, 32 * 32, 16)
    assert attn.bytes == 512 * 32 * 2 * 8 * 128 * 4
    f16 = decode_estimate.scaled_kernels(profile, att, base, target, ("float16", "float16"))
    assert next(k for k in f16 if k.name == attn.name).bytes == attn.bytes // 2


def test_report_labels_the_estimate():
    att = {"context": 512, "positions_per_simdgroup": 16,
           "grids": {"paged_attention_decode_f32": {"dispatches": 1, "threadgroups": 9,
                                                    "last_threads_per_threadgroup": 1024,
                                                    "max_simd_collectives": 5}}}
    counters = {"metal_estimate": decode_estimate.metalrt_estimate(_profile(), [att], 2, 1_000, 49152)}
    text = "\n".join(report._replayed_lines(counters))
    assert "ESTIMATE, not a measurement" in text and "4.00 MB of weights" in text
    assert "512 pos (16 disp, 0.5 MB K/V)" in text and "100 x 84%" in text and "M4 Max" in text
    counters["model_estimates"] = [
        {"model": "Llama-3.2-1B", "context": 512,
         "metalrt": metal_estimate.estimate(10**9, 200, chips=[_chip("M4 Max")]),
         "mlx_lm": metal_estimate.estimate(10**9, 300, chips=[_chip("M4 Max")])}]
    text = "\n".join(report._replayed_lines(counters))
    assert "metalrt against mlx-lm from the same arithmetic" in text
    row = next(line for line in text.splitlines() if line.startswith("| Llama-3.2-1B"))
    mine = metal_estimate.estimate(10**9, 200, chips=[_chip("M4 Max")])[0]["estimate_tok_s"]
    assert f"{mine:.1f} / " in row and "464" in row and "vllm-mlx" in row


def test_event_order_goal():
    commit, wait, replay = ("commit", "flush"), ("wait", ""), ("mark", "replay")
    read = ("read", "0x1000")
    assert decode_pipeline.committed_before_each_read([replay, commit, wait, read, replay, commit, read])
    # The read came before the next step was committed, or with no replay at all.
    assert not decode_pipeline.committed_before_each_read([replay, read, commit])
    assert not decode_pipeline.committed_before_each_read([replay, commit, read, commit, read])
    assert not decode_pipeline.committed_before_each_read([commit, read])
    assert not decode_pipeline.committed_before_each_read([replay, commit, wait])   # no read
