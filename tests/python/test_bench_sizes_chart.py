"""bench/sizes_chart.py: the sizes chart plots the figures of its result files, and a file
missing a field is a ValueError naming it."""
import copy
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench import metal_estimate, sizes_chart  # noqa: E402

RESULT = {
    "environment": {"cpus": 2, "load_average_start": "1.50 1.00 0.50"},
    "sizes": {
        "main_threads": 2,
        "models": {"tiny q4_k_m": {"bytes_per_token": 2_000_000_000},
                   "tiny-8l q4_k_m": {"bytes_per_token": 500_000_000}},
        "probes": {"2": {"gbps": 20.0}},
        "rows": [
            {"model": "tiny q4_k_m", "engine": "metalrt", "variant": "cpu", "threads": 2,
             "decode_tps": {"median": 7.0}},
            {"model": "tiny q4_k_m", "engine": "metalrt", "variant": "cpu", "threads": "1 (METALRT_CPU_THREADS)",
             "decode_tps": {"median": 4.0}},
            {"model": "tiny-8l q4_k_m", "engine": "metalrt", "variant": "cpu", "threads": 2,
             "decode_tps": {"median": 25.0}},
            {"model": "tiny q4_k_m", "engine": "llama.cpp", "variant": "q4_k_m", "threads": 2,
             "decode_tps": {"median": 5.0}},
            {"model": "tiny q4_k_m", "engine": "llama.cpp", "variant": "q4_k_m", "threads": 1,
             "decode_tps": {"median": 3.0}},
            {"model": "tiny q4_k_m", "engine": "transformers", "variant": "bf16", "threads": 2,
             "reason": "not installed"},
        ],
        "scaled": [{"model": "tiny (scaled from cuts)", "engine": "metalrt", "threads": 2,
                    "decode_tps_scaled": 1.5, "bytes_per_token": 8_000_000_000}],
    },
}


def lines_of(fig):
    return {line.get_label(): line for ax in fig.axes for line in ax.get_lines()}


def test_the_plotted_points_are_the_results_figures(tmp_path):
    label = sizes_chart.source_label(RESULT)
    assert label == "2 cores, load 1.50"
    fig = sizes_chart.render([(label, RESULT)])
    lines = lines_of(fig)
    mine = lines[f"metalrt cpu - {label}"]
    # Main-thread points, the scaled 48-layer row last; GB a token reads on x.
    assert list(mine.get_xdata()) == [2.0, 0.5]
    assert list(mine.get_ydata()) == [7.0, 25.0]
    assert list(lines[f"metalrt (48 layers, scaled) - {label}"].get_xdata()) == [8.0]
    assert list(lines[f"metalrt (48 layers, scaled) - {label}"].get_ydata()) == [1.5]
    assert list(lines[f"llama.cpp q4_k_m - {label}"].get_ydata()) == [5.0]
    roof = lines[f"roofline - {label} (20 GB/s, 2 thr)"]
    np.testing.assert_allclose(roof.get_ydata(), 20.0 / np.asarray(roof.get_xdata()))
    curve = lines[f"tiny q4_k_m metalrt - {label}"]
    assert list(curve.get_xdata()) == [1, 2] and list(curve.get_ydata()) == [4.0, 7.0]
    assert list(lines[f"tiny q4_k_m llama.cpp - {label}"].get_ydata()) == [3.0, 5.0]
    assert not any("transformers" in name for name in lines)   # its row has no figure
    estimates = {line.get_gid(): line for line in fig.axes[0].get_lines() if line.get_gid()}
    assert set(estimates) == {f"Metal estimate {c.name}" for c in metal_estimate.CHIPS}
    m2 = estimates["Metal estimate M2"]
    # 100 GB/s at the 84 % llama.cpp's 7B decode reaches on an M2 (discussion #4167).
    np.testing.assert_allclose(m2.get_ydata(), 100.0 * 21.91 * 3.56 * 2 ** 30 / 100e9
                               / np.asarray(m2.get_xdata()))
    published = lines["published llama.cpp (Metal, Apple chips)"]
    assert 21.91 in list(published.get_ydata()) and 83.06 in list(published.get_ydata())
    # The command writes a PNG of those figures.
    path = tmp_path / "result.json"
    path.write_text(json.dumps(RESULT))
    assert sizes_chart.main([str(tmp_path / "chart.png"), str(path)]) == 0
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("cut, field", [
    (lambda r: r.pop("sizes"), "sizes"),
    (lambda r: r["sizes"].pop("rows"), "rows"),
    (lambda r: r["sizes"]["models"]["tiny q4_k_m"].pop("bytes_per_token"), "bytes_per_token"),
    (lambda r: r["sizes"]["rows"][0].pop("engine"), "engine"),
    (lambda r: r["sizes"]["probes"]["2"].pop("gbps"), "gbps"),
    (lambda r: r["sizes"]["scaled"][0].pop("decode_tps_scaled"), "decode_tps_scaled"),
])
def test_a_result_missing_a_field_is_a_value_error_naming_it(cut, field):
    result = copy.deepcopy(RESULT)
    cut(result)
    with pytest.raises(ValueError, match=field):
        sizes_chart.render([("x", result)])
    # The next render of a whole result still works.
    assert sizes_chart.render([("x", RESULT)]).axes


def test_a_row_of_an_unknown_model_and_no_results_are_value_errors(tmp_path, capsys):
    result = copy.deepcopy(RESULT)
    result["sizes"]["rows"][0]["model"] = "other"
    with pytest.raises(ValueError, match="'other' is not in models"):
        sizes_chart.render([("x", result)])
    with pytest.raises(ValueError, match="no result files"):
        sizes_chart.render([])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"environment": {}}))
    assert sizes_chart.main([str(tmp_path / "c.png"), str(path)]) == 1
    assert "lacks sizes" in capsys.readouterr().err


def test_cuts_whose_longer_one_was_faster_give_no_scaled_figure():
    from bench import sizes
    cut = lambda n, tps: {"model": sizes.model_key("qwen3-30b-a3b", "q4_k_m", n), "engine": "metalrt",
                          "threads": 1, "decode_tps": {"median": tps}}
    assert sizes.scaled_moe([cut(4, 2.0), cut(8, 3.0)]) == []
    [row] = sizes.scaled_moe([cut(4, 2.0), cut(8, 1.0)])
    assert row["per_layer_ms"] == pytest.approx(125.0)   # (1/1 - 1/2) / 4 s
    # A negative figure an older run kept is not plotted (a log axis).
    result = copy.deepcopy(RESULT)
    result["sizes"]["scaled"][0]["decode_tps_scaled"] = -8.0
    assert "metalrt (48 layers, scaled) - x" not in lines_of(sizes_chart.render([("x", result)]))
