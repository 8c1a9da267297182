"""A zero-copy tensor's Python owner (the numpy array it wraps) is released safely on
any thread (cpp/python/python_owner.cpp). The last reference may go on a thread that
does not hold the GIL (Metal's completion thread, the simulated device's queue, a
Python thread inside a GIL-free wait): that thread must not wait for the GIL, which a
caller blocked on the GPU or on a runtime lock may hold. The test hook makes that
deterministic: a new thread drops the last reference while the caller holds the GIL
for TIMEOUT_S; a release that waits for the GIL cannot finish in that time."""
import sys
import threading
import time
import weakref

import numpy as np

import metalrt
from metalrt import _metalrt

TIMEOUT_S = 10.0   # the release itself takes microseconds


def wrapped(device):
    """A tensor over a fresh numpy array without a copy, and a weak reference to the array."""
    array = np.arange(4096, dtype=np.float32)
    tensor = metalrt.asarray(array, device=device, copy=False)
    assert tensor.numpy()[4095] == 4095.0
    return tensor, weakref.ref(array)


def test_a_thread_without_the_gil_drops_the_last_reference(device):
    tensor, array = wrapped(device)
    box = [tensor]
    del tensor
    assert array() is not None   # the tensor keeps it
    assert _metalrt._release_on_thread(box, TIMEOUT_S), "the releasing thread waited for the GIL"
    assert box == []
    # The reference is queued for a thread with the GIL: the main thread drops it at
    # its next bytecode boundary.
    deadline = time.monotonic() + TIMEOUT_S
    while array() is not None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert array() is None


def test_with_the_gil_the_reference_goes_at_once(device):
    tensor, array = wrapped(device)
    del tensor
    assert array() is None


def test_a_queued_reference_goes_at_the_next_wrapping(device):
    """On a Python thread other than the main one the next zero-copy wrapping drops a
    queued reference: CPython runs pending calls on the main thread only, which here is
    blocked in join() (the long switch interval keeps it from running bytecode while
    the worker holds the GIL, and the worker gives it up only in blocking calls)."""
    seen = []

    def worker():
        tensor, array = wrapped(device)
        metalrt.asarray(np.zeros(4, np.float32), copy=False)   # warms what it looks up
        box = [tensor]
        del tensor
        seen.append(_metalrt._release_on_thread(box, TIMEOUT_S))
        seen.append(array() is not None)   # queued, not dropped
        metalrt.asarray(np.zeros(4, np.float32), copy=False)
        seen.append(array() is None)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert seen == [True, True, True]
