"""Smoke test of ``python -m bench.serving --quick``: one client against metalrt serve,
and a llama.cpp row with the reason it is not measured (the test's peers venv is
empty: timing llama.cpp's server is the bench's own job, not a gate's); its JSON holds
positive figures. No speed is asserted."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_serving_bench_json(tmp_path):
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "bench.serving", "--quick", "--out-dir", str(out),
                           "--peers-venv", str(tmp_path / "no-peers")],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [path] = list(out.glob("serving-*.json"))
    result = json.loads(path.read_text())
    assert result["quick"] is True and "Serving:" in proc.stdout
    rows = {r["engine"]: r for r in result["rows"]}
    assert set(rows) == {"metalrt", "llama.cpp"}
    [level] = rows["metalrt"]["levels"]
    assert (level["clients"], level["requests"]) == (1, 2)
    assert level["requests_per_s"] > 0 and 0 < level["ttft_s"]["min"] <= level["ttft_s"]["max"]
    peer = rows["llama.cpp"]
    assert not peer["levels"] and peer["reason"].startswith("not installed"), peer


def test_hybrid_prefix_serving_bench_json(tmp_path):
    """``--hybrid-prefix`` on the tests' small Qwen3.5 twin: with the prefix cache the
    second request (the first prompt and one more question) resumes from a state
    checkpoint (its usage reports cached tokens), without it nothing is cached; the
    prompts are the same in both runs."""
    import tiny_hybrid

    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "bench.serving", "--hybrid-prefix",
                           str(tiny_hybrid.path("qwen3_5")), "--requests", "2",
                           "--max-tokens", "1", "--prompt-words", "40", "--threads", "1",
                           "--out-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [path] = list(out.glob("serving-hybrid-prefix-*.json"))
    rows = {r["prefix_cache"]: r for r in json.loads(path.read_text())["rows"]}
    assert rows[True]["prompt_tokens"] == rows[False]["prompt_tokens"]
    first, second = rows[True]["prompt_tokens"]
    assert first < second
    assert rows[True]["cached_tokens"][0] == 0
    assert 0 < rows[True]["cached_tokens"][1] < first
    assert rows[True]["cached_tokens"][1] % 16 == 0        # a block boundary
    assert rows[False]["cached_tokens"] == [0, 0]
    assert all(t > 0 for r in rows.values() for t in r["ttft_s"])
