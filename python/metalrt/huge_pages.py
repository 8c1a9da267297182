"""Host memory in transparent huge pages, for the buffers a CPU decode step reads
after the weights have streamed through the caches: the weights themselves
(``loaders/file_map.py``) and the KV cache (``cache/paged_kv.py``).

In 4 KB pages every page such a read touches is a TLB miss and a stop of the hardware
prefetchers; 2 MB pages (x86-64 and arm64 Linux) remove both. The memory is an
anonymous private mapping (shared anonymous memory is shmem, which transparent huge
pages leave alone by default) advised ``MADV_HUGEPAGE`` before its first touch, which
the kernel's default "madvise" mode needs, and started on a 2 MB boundary. The advice
is a hint: where the kernel refuses it the memory is the same, in small pages.
Measured in docs/cpu.md ("Weight memory", "Decode attention").
"""
from __future__ import annotations

import errno
import mmap

import numpy as np

HUGE_PAGE = 2 << 20


def available() -> bool:
    """True where the platform has ``MADV_HUGEPAGE`` (Linux)."""
    return hasattr(mmap, "MADV_HUGEPAGE")


def allocate(size: int) -> memoryview:
    """``size`` (> 0) writable, zero-filled bytes starting on a 2 MB boundary, advised
    ``MADV_HUGEPAGE``; the memoryview's ``obj`` is the ``mmap.mmap`` that owns them
    (``np.frombuffer`` views share it). Pages are faulted in on first touch.
    ValueError for a size of 0 or less; MemoryError when the memory cannot be mapped
    (as metalrt.zeros of that size); OSError where the platform lacks the advice (check
    ``available()``) or the kernel refuses the mapping otherwise."""
    if size <= 0:
        raise ValueError(f"huge_pages.allocate: size must be > 0, got {size}")
    if not available():
        raise OSError("huge_pages.allocate: this platform has no MADV_HUGEPAGE")
    # An anonymous mapping is page-aligned; one huge page more lets the buffer start on
    # a 2 MB boundary (newer kernels align large mappings themselves). The mapping
    # covers whole huge pages from there: the kernel backs a range with them (and
    # smaps calls the mapping THPeligible) only where an aligned 2 MB lies inside it.
    whole = -(-size // HUGE_PAGE) * HUGE_PAGE
    try:
        memory = mmap.mmap(-1, whole + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError as e:
        if e.errno == errno.ENOMEM:
            raise MemoryError(f"huge_pages.allocate: cannot map {size} bytes") from e
        raise
    memory.madvise(mmap.MADV_HUGEPAGE)   # before the first touch: faults take 2 MB pages
    start = -np.frombuffer(memory, np.uint8).ctypes.data % HUGE_PAGE
    return memoryview(memory)[start:start + size]
