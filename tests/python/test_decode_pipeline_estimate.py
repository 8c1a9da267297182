"""The bench's Metal decode estimate (bench/metal_estimate.py): the roofline and the
dispatch-cost model per named chip, printed as an estimate, never as a measurement, and
the replayed-step goals bench/decode_pipeline.py checks in the profiler's event log."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository's bench/
from bench import decode_pipeline, metal_estimate, report  # noqa: E402


def test_estimate_is_bytes_over_bandwidth_plus_dispatch_cost():
    rows = {r["chip"]: r for r in metal_estimate.estimate(100_000_000, 454)}
    assert list(rows) == ["M1", "M2", "M3 Pro", "M4 Max"]
    m2 = rows["M2"]
    assert (m2["bandwidth_gb_s"], m2["gpu_cores"]) == (100.0, 10)
    assert m2["roofline_tok_s"] == pytest.approx(1000.0)
    # 1 ms of memory traffic + 454 x 5 us of dispatches.
    assert m2["estimate_tok_s"] == pytest.approx(1 / (1e-3 + 454 * 5e-6))
    assert rows["M4 Max"]["estimate_tok_s"] > m2["estimate_tok_s"] > rows["M1"]["estimate_tok_s"]
    assert all(r["source"] and r["mlx_lm_published_tok_s"] is None for r in rows.values())
    with pytest.raises(ValueError, match="bytes_per_step > 0"):
        metal_estimate.estimate(0, 10)


def test_report_labels_the_estimate_and_the_missing_published_figures():
    counters = {"decode": {"weight_bytes": 96_580_000, "dispatches": 454},
                "per_dispatch_seconds": metal_estimate.PER_DISPATCH_SECONDS,
                "metal_estimate": metal_estimate.estimate(96_580_000, 454)}
    text = "\n".join(report._replayed_lines(counters))
    assert "ESTIMATE, not a measurement" in text and "96.58 MB read and 454 dispatches" in text
    assert text.count("none found") == 4 and "M4 Max" in text


def test_event_order_goal():
    commit, wait, replay = ("commit", "flush"), ("wait", ""), ("mark", "replay")
    read = ("read", "0x1000")
    assert decode_pipeline.committed_before_each_read([replay, commit, wait, read, replay, commit, read])
    # The read came before the next step was committed, or with no replay at all.
    assert not decode_pipeline.committed_before_each_read([replay, read, commit])
    assert not decode_pipeline.committed_before_each_read([replay, commit, read, commit, read])
    assert not decode_pipeline.committed_before_each_read([commit, read])
    assert not decode_pipeline.committed_before_each_read([replay, commit, wait])   # no read
