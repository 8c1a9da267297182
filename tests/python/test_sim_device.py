"""The simulated Metal device fails where a Mac would: a bad METALRT_SIM_ORDER is a
Python exception (not an abort), MSL `char` is signed whatever the host compiler's
default, and a threadgroup-array overrun is an error naming the array and index."""
import os
import subprocess
import sys

import numpy as np
import pytest

import metalrt

pytestmark = pytest.mark.skipif(not metalrt.is_available("metal"), reason="no Metal device")

# Runs one dispatch and reads the result back on the simulated device.
ONE_DISPATCH = """
import numpy as np, metalrt
a = metalrt.asarray(np.arange(40, dtype=np.float32), device="metal")
print(metalrt.ops.add(a, a).numpy()[39])
"""


def run_python(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "METALRT_METAL": "sim", **env})


@pytest.mark.parametrize("bad", ["sideways", "shuffle:-1"])
def test_a_bad_sim_order_raises_value_error_instead_of_aborting(bad):
    proc = run_python(ONE_DISPATCH, METALRT_SIM_ORDER=bad)
    assert proc.returncode == 1, f"exit {proc.returncode}: {proc.stderr}"   # -6 is the abort
    assert ("ValueError: METALRT_SIM_ORDER must be forward, reverse, shuffle or shuffle:<seed> "
            f"(a decimal seed), got '{bad}'") in proc.stderr
    for good in ("reverse", "shuffle:5"):
        proc = run_python(ONE_DISPATCH, METALRT_SIM_ORDER=good)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["78.0"]


@pytest.mark.parametrize("bad", ["12x", "0", "-4", "1048577"])
def test_a_bad_fiber_stack_size_is_refused_by_the_common_parser(bad):
    # Before, atol read "12x" as 12 KiB stacks and "0" or "-4" as the default.
    proc = run_python(ONE_DISPATCH, METALRT_SIM_STACK_KIB=bad)
    assert proc.returncode == 1, f"exit {proc.returncode}: {proc.stderr}"
    assert f"ValueError: METALRT_SIM_STACK_KIB must be an integer in [1, 1048576], got '{bad}'" in proc.stderr
    proc = run_python(ONE_DISPATCH, METALRT_SIM_STACK_KIB="256")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["78.0"]


WIDEN_CHARS = r"""
#include <metal_stdlib>
using namespace metal;
kernel void widen_chars(device const uchar* bytes [[buffer(0)]],
                        device int* out [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
  out[i] = int(char(bytes[i]));
}
"""


def test_char_is_signed_with_a_compiler_that_defaults_to_unsigned(tmp_path, monkeypatch):
    # arm64 Linux compilers default to unsigned char; this wrapper makes any host one.
    wrapper = tmp_path / "unsigned-char-cxx"
    wrapper.write_text(f'#!/bin/sh\nexec {os.environ.get("CXX") or "c++"} -funsigned-char "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CXX", str(wrapper))
    monkeypatch.setenv("METALRT_CACHE_DIR", str(tmp_path / "cache"))
    lib = metalrt.compile_shader(WIDEN_CHARS)
    raw = np.array([0, 1, 127, 128, 200, 255], np.uint8)
    out = metalrt.asarray(np.full(raw.size, -7, np.int32), device="metal")
    lib.widen_chars(metalrt.asarray(raw, device="metal"), out, threads=raw.size, group_size=raw.size)
    assert out.numpy().tolist() == raw.view(np.int8).astype(np.int64).tolist()


OVERRUN = r"""
#include <metal_stdlib>
using namespace metal;
kernel void shift_left(device float* out [[buffer(0)]],
                       uint tid [[thread_index_in_threadgroup]],
                       uint n [[threads_per_threadgroup]]) {
  threadgroup float staged[32];
  staged[tid] = float(tid);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = staged[tid + 1];   // the last thread reads staged[n]
}
"""


def test_a_threadgroup_array_overrun_is_an_error():
    lib = metalrt.compile_shader(OVERRUN)
    out = metalrt.asarray(np.full(32, np.nan, np.float32), device="metal")
    lib.shift_left(out, threads=31, group_size=31)   # in bounds: the last thread reads staged[31]
    assert out.numpy()[:30].tolist() == list(range(1, 31))
    with pytest.raises(RuntimeError, match=r"kernel 'shift_left' .*threadgroup array 'staged' "
                                           r"\(.*shader\.metal:7\): index 32 is out of bounds \[0, 32\) "
                                           r"\(thread 31 of threadgroup \(0, 0, 0\)\)"):
        lib.shift_left(out, threads=32, group_size=32)
        metalrt.synchronize("metal")

