"""metalrt.profiler and metalrt.flush: the Metal backend's counters from Python.

The dispatch-level gates (rows per kernel, commits at flush points, GPU time inside
the waits) are the doctest gates tests/cpp/test_profiler.cpp and
test_command_stream.cpp; here: the Python surface over them.
"""
import numpy as np
import pytest

import metalrt

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
