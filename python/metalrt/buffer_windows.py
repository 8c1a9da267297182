"""Windows of a model file for devices whose buffers have a maximum length.

A Metal buffer cannot exceed the device's ``maxBufferLength`` (16 GiB on an M1 Max,
about 27 GB on a 48 GB M4 Pro: ggml-org/llama.cpp#1815, exo-explore/exo#1048), so a
file larger than that cannot be wrapped as one no-copy buffer. The loaders register
the byte ranges of a mapped file's tensors here; ``window`` then cuts the file into
runs of whole tensors, each run's page hull at most the limit, in file order, and
gives the run holding an array. Consecutive runs share at most the page where one
ends and the next begins; the allocation registry resolves a tensor to the later
one, which holds it too (cpp/gpu/external_memory.cpp).
"""
from __future__ import annotations

import bisect
import mmap
import weakref
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

_PAGE = mmap.PAGESIZE


class _Layout:
    def __init__(self, ranges: List[Tuple[int, int]]):
        self.ranges = ranges                                  # absolute [start, end), by start
        self.windows: Dict[int, List[Tuple[int, int]]] = {}   # limit -> runs


# mapping owner (the mmap) -> its tensors' layout; dropped with the mapping
_LAYOUTS: "weakref.WeakKeyDictionary[object, _Layout]" = weakref.WeakKeyDictionary()


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def register(mapping: memoryview, ranges: Sequence[Tuple[int, int]]) -> None:
    """Records that ``mapping`` (a ``file_map.map_file`` memoryview) holds tensors at the
    byte ranges ``ranges`` ([start, end) offsets into the mapping)."""
    base = _address(np.frombuffer(mapping, np.uint8))
    _LAYOUTS[mapping.obj] = _Layout(sorted((base + s, base + e) for s, e in ranges if e > s))


def _floor(x: int) -> int:
    return x // _PAGE * _PAGE


def _ceil(x: int) -> int:
    return -(-x // _PAGE) * _PAGE


def _runs(ranges: List[Tuple[int, int]], limit: int) -> List[Tuple[int, int]]:
    """Greedy runs of consecutive tensors: a run grows while its page hull stays within
    ``limit``. ValueError for a tensor whose own hull exceeds it."""
    runs: List[Tuple[int, int]] = []
    for start, end in ranges:
        if _ceil(end) - _floor(start) > limit:
            raise ValueError(f"a tensor of {end - start} bytes exceeds the device's maximum buffer "
                             f"length (maxBufferLength, {limit} bytes): it cannot be wrapped")
        if runs and _ceil(end) - _floor(runs[-1][0]) <= limit:
            runs[-1] = (runs[-1][0], max(runs[-1][1], end))
        else:
            runs.append((start, end))
    return runs


def window(region: np.ndarray, array: np.ndarray, limit: int) -> Optional[np.ndarray]:
    """The part of ``region`` (a uint8 view of the whole mapping ``array`` lies in) a
    device with buffers of at most ``limit`` bytes wraps for ``array``: the run of
    registered tensors holding it. None when the mapping has no registered layout or
    no run holds the whole array (a view over tensors of two runs): the caller then
    wraps the array's own bytes. ValueError when a registered tensor exceeds the limit."""
    owner = region.base.obj if isinstance(region.base, memoryview) else None
    layout = _LAYOUTS.get(owner) if owner is not None else None
    if layout is None:
        return None
    runs = layout.windows.get(limit)
    if runs is None:
        runs = layout.windows[limit] = _runs(layout.ranges, limit)
    begin, end = _address(array), _address(array) + array.nbytes
    i = bisect.bisect_right(runs, (begin, float("inf"))) - 1
    if i < 0 or runs[i][1] < end:
        return None
    base = _address(region)
    return region[runs[i][0] - base:runs[i][1] - base]
