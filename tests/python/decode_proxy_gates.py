"""Issue #40's decode-attention gates on a bench.counters result (``counters.run``), shared
by the default model's (test_decode_dispatches.py) and the 1B shapes' (test_decode_proxies_1b.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository's bench/
from bench import parallelism  # noqa: E402


def check_attention(decode) -> dict:
    """Asserts the attention proxies at 128 to 4,096 positions (<= 16 positions and
    <= 64 collectives a SIMD-group, >= 256 SIMD-groups at 512, output against the CPU);
    returns the rows by context."""
    rows = {r["context"]: r for r in decode["decode_attention"]}
    assert sorted(rows) == [128, 512, 1024, 4096]
    for context, r in rows.items():
        assert r["nmse"] < 1e-10, context
        assert r["positions_per_simdgroup"] <= parallelism.GOALS["positions_per_simdgroup"], context
        # Counted by the device: 0 would mean nothing was measured.
        assert 0 < r["collectives_per_simdgroup"] <= parallelism.GOALS["collectives_per_simdgroup"], context
    assert rows[512]["simdgroups"] >= parallelism.GOALS["simdgroups_at_512"]
    assert decode["goal"]["decode_attention_parallel"]
    # The step's busiest SIMD-group of any dispatch (the prompt's short context).
    assert 0 < decode["max_simd_collectives"]["decode"] <= parallelism.GOALS["collectives_per_simdgroup"]
    return rows
