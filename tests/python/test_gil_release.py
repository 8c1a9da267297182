"""GPU waits release the GIL: while one Python thread waits in synchronize() (or a host
read), another keeps running. Deterministic: the kernel spins until the host writes a
flag, and the writer thread writes it only after seeing the kernel start, which is
after the waiting thread's synchronize() committed the work. With the GIL held, the
writer never runs during the wait and the kernel gives up after its spin limit."""
import ctypes
import threading
import time

import numpy as np
import pytest

import metalrt

pytestmark = pytest.mark.skipif(not metalrt.is_available("metal"), reason="needs a Metal device")

SPIN = r"""
#include <metal_stdlib>
using namespace metal;

// started = 1, then waits (at most `limit` polls) for the host to set flag; out = flag.
kernel void wait_for_host(device atomic_int* started [[buffer(0)]],
                          device atomic_int* flag [[buffer(1)]],
                          device int* out [[buffer(2)]],
                          constant uint& limit [[buffer(3)]],
                          uint tid [[thread_position_in_grid]]) {
  atomic_store_explicit(started, 1, memory_order_relaxed);
  for (uint i = 0; i < limit && atomic_load_explicit(flag, memory_order_relaxed) == 0; ++i) {}
  out[0] = atomic_load_explicit(flag, memory_order_relaxed);
}
"""
SPIN_LIMIT = np.uint32(200_000_000)   # seconds on the sim; the writer needs microseconds


def int_at(tensor):
    return ctypes.c_int32.from_address(tensor.data_ptr())


@pytest.mark.parametrize("wait", ["synchronize", "host_read"])
def test_another_thread_runs_while_one_waits_for_the_gpu(wait):
    kernel = metalrt.compile_shader(SPIN).wait_for_host
    started = metalrt.zeros([1], dtype="int32", device="metal")
    flag = metalrt.zeros([1], dtype="int32", device="metal")
    out = metalrt.asarray(np.array([-7], np.int32), device="metal")
    metalrt.synchronize()
    kernel(started, flag, out, SPIN_LIMIT, threads=(1, 1, 1), group_size=(1, 1, 1))
    saw_start = threading.Event()

    def writer():
        # Raw stores, no metalrt call: a copy would itself wait for the kernel.
        deadline = time.monotonic() + 120
        while int_at(started).value == 0:
            if time.monotonic() > deadline:
                return
        saw_start.set()
        int_at(flag).value = 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    if wait == "synchronize":
        metalrt.synchronize()
        result = out.numpy()
    else:
        result = out.numpy()   # the host read commits and waits
    thread.join(timeout=130)
    assert saw_start.is_set()
    assert result.tolist() == [1], "the kernel timed out: the writer thread did not run during the wait"
