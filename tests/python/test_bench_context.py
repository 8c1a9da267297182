"""The context section's pure parts (``bench/context.py``, ``bench/context_worker.py``):
argument parsing (its bad arguments: test_bench_cli.py), the fill plan, the decode figures, the KV bytes against the formula and
the Metal estimate rows. Its speed is measured by ``python -m bench --sections context``,
never here."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import bench.__main__ as bench  # noqa: E402
from bench import context, context_worker, kv_bytes, metal_estimate  # noqa: E402


def test_context_arguments_parse_to_sorted_lengths():
    args = bench.parse(["--sections", "context", "--context-lengths", "4096,128,4096",
                        "--context-prefill", "2048"])
    assert args.sections == ["context"]
    assert args.context_lengths == [128, 4096]
    assert args.context_prefill == 2048
    default = bench.parse(["--sections", "context"])
    assert default.context_lengths == [128, 4096, 16384, 32768]
    assert default.context_prefill == 16384


def test_contexts_above_the_prefill_length_extend_the_fill_before_them():
    assert context_worker.fill_plan([32768, 128, 16384, 4096], 16384) == [
        {"context": 128, "extends": None}, {"context": 4096, "extends": None},
        {"context": 16384, "extends": None}, {"context": 32768, "extends": 16384}]
    # Beyond the prefill length every context continues the one before it.
    assert [s["extends"] for s in context_worker.fill_plan([128, 512, 1024, 2048], 512)] == \
        [None, None, 512, 1024]
    # A first context above the prefill length has nothing to extend: a fresh fill.
    assert context_worker.fill_plan([1024], 512) == [{"context": 1024, "extends": None}]


def test_decode_figures_are_of_the_sum_and_of_the_median_step():
    figures = context_worker.decode_figures([0.01, 0.02, 0.03, 0.5])
    assert figures["decode_tps"] == pytest.approx(4 / 0.56)
    assert figures["decode_tps_median_step"] == pytest.approx(1 / 0.025)
    assert figures["decode_steps"] == 4


def test_measured_kv_bytes_per_token_equal_the_formula():
    # The default model (SmolLM2-135M): 30 layers, 3 KV heads of 64 features, K and V.
    rows = context.kv_bytes_check(kv_bytes.measured_per_token(64))
    assert {t: r["measured"] for t, r in rows.items()} == {
        "float32": 30 * 2 * 3 * 64 * 4, "float16": 30 * 2 * 3 * 64 * 2,
        "bfloat16": 30 * 2 * 3 * 64 * 2, "q8_0": 30 * 2 * 3 * 2 * 34, "q4_0": 30 * 2 * 3 * 2 * 18}
    assert all(r["equal"] for r in rows.values())


def test_a_cache_that_differs_from_the_formula_is_flagged():
    rows = context.kv_bytes_check({"q8_0": (12240.0, 12240), "float16": (23041.0, 23040)})
    assert rows["q8_0"]["equal"] and not rows["float16"]["equal"]


def test_the_metal_rows_add_the_contexts_kv_bytes_to_the_counted_step():
    counts = {"weight_bytes": 96_000_000, "dispatches": 245}
    rows = context.metal_rows(counts, 12240, [128, 32768])
    assert [r["step_bytes"] for r in rows] == [96_000_000 + 128 * 12240, 96_000_000 + 32768 * 12240]
    assert rows[1]["chips"] == metal_estimate.estimate(96_000_000 + 32768 * 12240, 245)
    # A longer context reads more, so every chip's estimate falls.
    assert all(a["estimate_tok_s"] > b["estimate_tok_s"]
               for a, b in zip(rows[0]["chips"], rows[1]["chips"]))


def test_the_table_shows_figures_extensions_and_reasons():
    section = {"contexts": [128, 1024], "prefill_context": 512, "decode_tokens": 16,
               "threads": 2, "note": "speed only above 8192",
               "kv_bytes_per_token": context.kv_bytes_check({"q8_0": (12240.0, 12240)}),
               "rows": [{"engine": "metalrt", "kv_type": "q8_0", "rows": [
                   {"context": 128, "extends": None, "decode_tps": 70.25, "fill_tps": 700.0},
                   {"context": 1024, "extends": 128, "decode_tps": 50.0, "fill_tps": 650.0}]},
                   {"engine": "llama.cpp", "kv_type": "q8_0", "reason": "not installed"}],
               "metal": {"q8_0": {"reason": "failed (exit 1): no device"}}}
    text = context.context_table(section)
    assert "70.2" in text and "650.0*" in text and "700.0" in text
    assert "not installed" in text and "12,240 / 12,240" in text and "no device" in text
