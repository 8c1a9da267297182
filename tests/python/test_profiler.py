"""metalrt.profiler and metalrt.flush: the Metal backend's counters from Python.

The dispatch-level gates (rows per kernel, commits at flush points, GPU time inside
the waits) are the doctest gates tests/cpp/test_profiler.cpp and
test_command_stream.cpp; here: the Python surface over them.
"""
import numpy as np
import pytest

import metalrt
from metalrt.plan import read_output

HAVE_METAL = metalrt.is_available("metal")


def test_flush_devices_and_errors():
    metalrt.flush("cpu")   # the CPU runs synchronously: nothing to commit
    with pytest.raises(ValueError, match="unknown device 'cuda'"):
        metalrt.flush("cuda")
    with pytest.raises(TypeError):
        metalrt.flush(None)


def test_profiler_state_rows_and_counters():
    if not HAVE_METAL:
        for call in (metalrt.profiler.enabled, metalrt.profiler.rows, metalrt.profiler.reset,
                     lambda: metalrt.profiler.enable(True), metalrt.flush):
            with pytest.raises(RuntimeError, match="metal"):
                call()
        return
    was = metalrt.profiler.enabled()
    try:
        metalrt.synchronize("metal")    # work an earlier test left queued is not this test's
        metalrt.profiler.enable(True)
        assert metalrt.profiler.enabled() is True
        metalrt.profiler.reset()
        assert metalrt.profiler.enabled() is True   # reset keeps the state
        assert metalrt.profiler.rows() == []
        assert metalrt.profiler.commits() == 0
        assert metalrt.profiler.waits() == 0
        # Host writes and reads of Metal memory with no GPU work pending commit nothing.
        values = np.arange(33, dtype=np.float32) - 7.5
        t = metalrt.asarray(values, device="metal")
        np.testing.assert_array_equal(t.numpy(), values)
        metalrt.flush()
        metalrt.synchronize("metal")
        assert metalrt.profiler.commits() == 0
        assert metalrt.profiler.waits() == 0
        metalrt.profiler.enable(False)
        assert metalrt.profiler.enabled() is False
    finally:
        metalrt.profiler.enable(was)


# A user kernel (metalrt.compile_shader) gives Python real dispatches to count.
AFFINE = r"""
#include <metal_stdlib>
using namespace metal;

kernel void affine(device const float* x [[buffer(0)]],
                   device float* y [[buffer(1)]],
                   constant uint& n [[buffer(2)]],
                   constant float& scale [[buffer(3)]],
                   constant float& shift [[buffer(4)]],
                   uint i [[thread_position_in_grid]]) {
  if (i < n) y[i] = x[i] * scale + shift;
}
"""


def commit_causes(total):
    """(commits_at_cap, commits_at_flush, commits_at_synchronize) of a total row,
    checked to sum to its commits."""
    causes = (total["commits_at_cap"], total["commits_at_flush"], total["commits_at_synchronize"])
    assert sum(causes) == total["commits"]
    return causes


@pytest.fixture
def affine():
    """(dispatch(x, y, scale, shift), fresh counters); profiling on for the test."""
    assert HAVE_METAL, "every build has a Metal device: the simulated one at least"
    lib = metalrt.compile_shader(AFFINE)

    def dispatch(x, y, scale, shift):
        n = x.shape[0]
        lib.affine(x, y, np.uint32(n), np.float32(scale), np.float32(shift),
                   threads=(n, 1, 1), group_size=(32, 1, 1))

    was = metalrt.profiler.enabled()
    metalrt.synchronize("metal")   # nothing of earlier tests left in flight
    metalrt.profiler.enable(True)
    metalrt.profiler.reset()
    yield dispatch
    metalrt.profiler.enable(was)


def test_eight_dispatches_commit_once_at_synchronize(affine):
    values = np.arange(33, dtype=np.float32) * 0.5 - 3.0
    x = metalrt.asarray(values, device="metal")
    for _ in range(8):
        affine(x, x, 2.0, 1.0)
    assert metalrt.profiler.commits() == 0
    metalrt.synchronize("metal")
    assert metalrt.profiler.commits() == 1
    assert metalrt.profiler.waits() == 1
    np.testing.assert_array_equal(x.numpy(), 256.0 * values + 255.0)   # exact in f32
    rows = metalrt.profiler.rows()
    assert [r["name"] for r in rows] == ["affine", "total"]
    assert rows[0]["dispatches"] == 8 and rows[0]["encode_seconds"] > 0
    # 33 threads in groups of 32: two threadgroups per dispatch, the edge one partial.
    assert rows[0]["threadgroups"] == 16 and rows[0]["last_grid"] == (2, 1, 1)
    total = rows[1]
    # One SIMD-group a threadgroup (the edge one of 1 thread counts whole); no collectives.
    assert rows[0]["simdgroups"] == 16 and rows[0]["last_threads_per_threadgroup"] == 32
    assert rows[0]["max_simd_collectives"] == 0
    assert set(total) == {"name", "dispatches", "encode_seconds", "threadgroups", "last_grid",
                          "last_threads_per_threadgroup", "simdgroups", "max_simd_collectives",
                          "commits", "commits_at_cap", "commits_at_flush",
                          "commits_at_synchronize", "waits", "wait_seconds", "gpu_seconds",
                          "allocations", "allocated_bytes"}
    assert (total["dispatches"], total["commits"], total["waits"]) == (8, 1, 1)
    assert total["threadgroups"] == 16 and total["last_grid"] == (0, 0, 0)
    assert commit_causes(total) == (0, 0, 1)   # the synchronize committed it
    assert 0 < total["gpu_seconds"] <= total["wait_seconds"]


CHAIN = """
#include <metal_stdlib>
using namespace metal;
// SIMD-group s of the threadgroup makes `base` + s simd_sums, then one simd_max.
kernel void chain(device float* y [[buffer(0)]],
                  constant uint& base [[buffer(1)]],
                  uint i [[thread_position_in_grid]],
                  uint s [[simdgroup_index_in_threadgroup]]) {
  float v = 1.0f;
  for (uint k = 0; k < base + s; ++k) v = simd_sum(v) / 32.0f;
  y[i] = simd_max(v);
}
"""


@pytest.mark.skipif(not HAVE_METAL or not metalrt.device_info("metal")["simulated"],
                    reason="the simulated device counts collectives")
def test_the_simulated_device_counts_the_busiest_simdgroups_collectives():
    lib = metalrt.compile_shader(CHAIN)
    y = metalrt.asarray(np.full(256, np.nan, np.float32), device="metal")
    was = metalrt.profiler.enabled()
    metalrt.synchronize("metal")
    metalrt.profiler.enable(True)
    metalrt.profiler.reset()
    try:
        # 2 threadgroups of 4 SIMD-groups: the busiest (s = 3) makes 5 + 3 + 1.
        lib.chain(y, np.uint32(5), threads=(256, 1, 1), group_size=(128, 1, 1))
        lib.chain(y, np.uint32(2), threads=(256, 1, 1), group_size=(128, 1, 1))
        metalrt.synchronize("metal")
        rows = {r["name"]: r for r in metalrt.profiler.rows()}
    finally:
        metalrt.profiler.enable(was)
        metalrt.profiler.reset()
    np.testing.assert_array_equal(y.numpy(), np.ones(256, np.float32))
    assert rows["chain"]["simdgroups"] == 16
    assert rows["chain"]["max_simd_collectives"] == 9          # the larger of 9 and 6
    assert rows["total"]["max_simd_collectives"] == 9


def test_a_host_read_without_a_sync_returns_the_computed_values(affine):
    values = np.linspace(-4.0, 4.0, 1000, dtype=np.float32)
    x = metalrt.asarray(values, device="metal")
    y = metalrt.asarray(np.full(1000, np.nan, np.float32), device="metal")
    affine(x, y, -3.0, 0.25)
    np.testing.assert_array_equal(y.numpy(), values * np.float32(-3.0) + np.float32(0.25))
    assert (metalrt.profiler.commits(), metalrt.profiler.waits()) == (1, 1)
    assert commit_causes(metalrt.profiler.rows()[-1]) == (0, 0, 1)   # the read synchronized


def test_events_log_each_host_read_after_its_wait_waited_for_or_not(affine):
    x = metalrt.asarray(np.ones(64, np.float32), device="metal")
    y = metalrt.asarray(np.full(64, np.nan, np.float32), device="metal")
    affine(x, y, 2.0, 1.0)
    metalrt.flush()
    np.testing.assert_array_equal(read_output(y), np.full(64, 3.0, np.float32))
    # Nothing pending writes y: no wait, still a read, at the view's first byte.
    tail = y[32:]
    np.testing.assert_array_equal(tail.numpy(), np.full(32, 3.0, np.float32))
    assert tail.data_ptr() == y.data_ptr() + 128
    assert metalrt.profiler.events() == [("commit", "flush"), ("wait", ""),
                                         ("read", hex(y.data_ptr())), ("read", hex(tail.data_ptr()))]


def test_flush_commits_without_waiting(affine):
    x = metalrt.asarray(np.ones(64, np.float32), device="metal")
    affine(x, x, 3.0, 0.0)
    metalrt.flush()
    assert (metalrt.profiler.commits(), metalrt.profiler.waits()) == (1, 0)
    metalrt.flush()   # nothing open: no empty command buffer
    assert metalrt.profiler.commits() == 1
    np.testing.assert_array_equal(x.numpy(), np.full(64, 3.0, np.float32))
    assert (metalrt.profiler.commits(), metalrt.profiler.waits()) == (1, 1)
    # The read waited for the flushed command buffer without committing another.
    assert commit_causes(metalrt.profiler.rows()[-1]) == (0, 1, 0)


def test_a_kernel_on_rows_1_to_3_changes_only_those_rows(affine):
    base = np.arange(4 * 33, dtype=np.float32).reshape(4, 33)
    t = metalrt.asarray(base, device="metal")
    rows = t[1:3].reshape(2 * 33)
    affine(rows, rows, -1.0, 0.5)
    expected = base.copy()
    expected[1:3] = -base[1:3] + 0.5
    np.testing.assert_array_equal(t.numpy(), expected)


def test_profiler_off_records_nothing(affine):
    metalrt.profiler.enable(False)
    x = metalrt.asarray(np.ones(8, np.float32), device="metal")
    affine(x, x, 1.0, 1.0)
    metalrt.synchronize("metal")
    np.testing.assert_array_equal(x.numpy(), np.full(8, 2.0, np.float32))
    assert metalrt.profiler.rows() == []
    assert (metalrt.profiler.commits(), metalrt.profiler.waits()) == (0, 0)
