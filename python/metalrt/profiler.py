"""Profile counters of the Metal backend.

Off by default (or on from the start with the environment variable
``METALRT_PROFILE=1``); off, nothing is recorded and no clock is read. On, the
backend keeps one row per kernel name — how many times it was dispatched and the
host seconds spent encoding those dispatches — and a total row with the
command-buffer commits (each also counted under its cause: the dispatch cap, an
explicit flush, or a synchronize before a host access), the host waits for the GPU, the seconds spent waiting and
the seconds the GPU was busy (summed from each command buffer's GPU start and end
times; GPU time fits inside the waits when work is committed at a synchronize), and
the buffers the device newly created (an allocation served by the buffer cache of
freed buffers creates none, so a warmed-up decode step allocates 0 bytes).
The kernel name proves which kernel ran, e.g. the decode GEMV versus the tiled
GEMM. Commits are what encoder batching minimises (docs/architecture.md).

All functions raise RuntimeError when no Metal device is available.
"""
from __future__ import annotations

from . import _metalrt

_native = _metalrt.profiler


def enable(on: bool = True) -> None:
    """Switch profiling on (``True``) or off; recorded rows are kept."""
    _native.enable(bool(on))


def enabled() -> bool:
    """Whether profiling is on."""
    return _native.enabled()


def reset() -> None:
    """Forget every row and counter; the on/off state is kept."""
    _native.reset()


def rows() -> list[dict]:
    """The recorded rows: one per kernel name (sorted by name), then ``"total"``.

    Every row is a dict with keys ``name`` (str), ``dispatches`` (int),
    ``encode_seconds`` (float, host seconds), ``threadgroups`` (int, threadgroups
    launched over all dispatches; the total row sums them), ``last_grid`` (the last
    dispatch's grid in threadgroups, an (x, y, z) tuple of ints; (0, 0, 0) in the
    total row), ``last_threads_per_threadgroup`` (int, the last dispatch's; 0 in the
    total row), ``simdgroups`` (int, SIMD-groups of 32 threads launched over all
    dispatches, a partial one counted whole; the total row sums them),
    ``max_simd_collectives`` (int, measured by the device as the dispatches ran: the
    SIMD-group collectives — ``simd_sum``, ``simd_max``, ``simd_shuffle``, ... one each
    — made by the busiest SIMD-group of any of them, the length of its serial
    reduction chain; the total row takes the maximum. The simulated device counts them;
    Apple's Metal reports none, so 0 there), and — meaningful in the total row,
    zero in kernel rows — ``commits`` (command buffers committed), ``waits`` (host
    waits for the GPU), ``wait_seconds`` and ``gpu_seconds`` (float seconds),
    ``allocations`` and ``allocated_bytes`` (device buffers newly created).

    ``commits`` is the sum of three int counters, one per cause of a commit (the
    command stream's flush points, ``cpp/gpu/command_stream.h``):

    * ``commits_at_cap``: the open command buffer reached the dispatch cap
      (``METALRT_MAX_DISPATCHES``, default 48) and was committed so the GPU can start
      while the host keeps encoding;
    * ``commits_at_flush``: an explicit :func:`metalrt.flush` committed it without
      waiting;
    * ``commits_at_synchronize``: committed by a synchronize, i.e. before a host
      wait (a host read or write of device memory with work pending, or
      :func:`metalrt.synchronize`). A synchronize with nothing open commits nothing
      (it may still wait for work the cap or a flush committed).

    Empty when nothing was recorded.
    """
    return _native.rows()


def commits() -> int:
    """Command buffers committed since profiling was enabled or reset."""
    return _native.commits()


def waits() -> int:
    """Host waits for the GPU (one per synchronize that had work in flight)."""
    return _native.waits()


def allocations() -> int:
    """Device buffers newly created since profiling was enabled or reset (allocations
    served by the buffer cache of freed buffers are not counted)."""
    return _native.allocations()


def allocated_bytes() -> int:
    """Bytes of the device buffers counted by ``allocations``."""
    return _native.allocated_bytes()


def events() -> list[tuple[str, str]]:
    """The host-side order of commits, waits, reads and marks since profiling was
    enabled or reset (the newest 65,536): ``("commit", cause)`` with cause ``"cap"``,
    ``"flush"`` or ``"synchronize"``; ``("wait", "")`` for each host wait for the GPU;
    ``("read", address)`` for each host read of Metal memory at a flush point
    (:func:`metalrt.plan.read_output`, ``Tensor.numpy()``, an op's host check of an
    index tensor), after the wait it needed if any, with the address of the first byte
    read as ``hex(tensor.data_ptr())`` spells it; ``("mark", label)`` where the runtime
    marks a point, e.g. ``"replay"`` when a decode plan's replay starts
    (``metalrt.plan``). The log shows pipelining: a step's first commit listed before
    the read of the previous step's tokens. A read is logged whether or not it waited:
    the GPU may have finished the work that writes the tensor before the host asks
    (the command stream then retires it and the read waits for nothing)."""
    return _native.events()
