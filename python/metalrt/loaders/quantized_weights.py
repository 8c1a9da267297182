"""Quantized weights (``QuantizedWeight``) of a model on its device: upload without a
copy, and stacking the rows of several projections (Q/K/V, gate/up) into one matrix.

Stacking matters because a merged projection is one GEMV per decode step instead of
several; it is free when the parts lie back to back in the mapped file (GGUF files
written by llama.cpp order a layer's tensors by name, so ``ffn_gate`` is followed by
``ffn_up``), and otherwise a copy of the quantized rows (never a float copy).
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

import metalrt

from .quants import QuantizedWeight


def to_device(w: QuantizedWeight, device: str) -> "metalrt.QuantizedTensor":
    """``w`` as a ``metalrt.QuantizedTensor`` on ``device``: the file's bytes wrapped
    without a copy where the device addresses host memory; rows copied at load (stacked
    or regrouped, owned by a numpy array rather than a file mapping) are uploaded into
    device memory instead of wrapping each small host buffer."""
    def field(a):
        if a is None or a.dtype == np.uint16 or not isinstance(_owner(a), np.ndarray):
            return a    # a view of the mapped file, or bfloat16 bits (wrapped as such)
        return metalrt.asarray(a, device=device)
    return metalrt.quantized_tensor(w.format, w.shape, field(w.data), field(w.scales),
                                    field(w.biases), bits=w.bits, group_size=w.group_size,
                                    device=device)


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _owner(a: np.ndarray):
    """The object that owns an array's memory (e.g. the mmap of a file; np.frombuffer
    puts a memoryview of it in between)."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a.obj if isinstance(a, memoryview) else a


def _adjacent_rows(parts: Sequence[np.ndarray]) -> Optional[np.ndarray]:
    """One view over row-major matrices of equal width that follow each other in
    memory inside one buffer object (e.g. the mapping of the file), made from that
    buffer so that it stays a view of it; else None."""
    first = parts[0]
    owner = _owner(first)
    if isinstance(owner, np.ndarray) or not all(p.flags.c_contiguous for p in parts):
        return None
    for before, after in zip(parts, parts[1:]):
        if _owner(after) is not owner or _address(after) != _address(before) + before.nbytes:
            return None
    start = _address(first) - _address(np.frombuffer(owner, np.uint8))
    rows = sum(p.shape[0] for p in parts)
    return np.frombuffer(owner, first.dtype, rows * first.shape[1], start).reshape(rows, -1)


def _copied_rows(fields: Sequence[Sequence[np.ndarray]]) -> list:
    """Each field's parts concatenated along the rows, all inside one allocation (64-byte
    aligned slots), so that a device wraps the copy once, not once per small array."""
    sizes = [sum(a.nbytes for a in arrays) for arrays in fields]
    slots = [-(-n // 64) * 64 for n in sizes]
    buffer = np.empty(sum(slots), np.uint8)
    out, start = [], 0
    for arrays, size, slot in zip(fields, sizes, slots):
        rows = sum(a.shape[0] for a in arrays)
        view = buffer[start:start + size].view(arrays[0].dtype).reshape(rows, arrays[0].shape[1])
        np.concatenate(arrays, out=view)
        out.append(view)
        start += slot
    return out


def stack(parts: Sequence[QuantizedWeight], copy: bool) -> Optional[QuantizedWeight]:
    """The rows of ``parts`` (same format and parameters) as one ``QuantizedWeight``:
    views when every field (data, scales, biases) is adjacent in memory, else a copy of
    the quantized rows when ``copy`` is true, else None (also None when the parts
    differ in kind)."""
    if len(parts) == 1:
        return parts[0]
    if not all(parts[0].same_kind(p) for p in parts[1:]):
        return None
    names = [f for f in ("data", "scales", "biases") if getattr(parts[0], f) is not None]
    fields = [[getattr(p, f) for p in parts] for f in names]
    stacked = [_adjacent_rows(arrays) for arrays in fields]
    if any(view is None for view in stacked):
        if not copy:
            return None
        stacked = _copied_rows(fields)
    first = parts[0]
    return dataclasses.replace(first, shape=(sum(p.shape[0] for p in parts), first.shape[1]),
                               source=" + ".join(p.source for p in parts),
                               **dict(zip(names, stacked)))


def take_rows(w: QuantizedWeight, rows: np.ndarray) -> QuantizedWeight:
    """Rows ``rows`` of ``w`` (its rows are independent), copied."""
    names = [f for f in ("data", "scales", "biases") if getattr(w, f) is not None]
    picked = _copied_rows([[getattr(w, f)[rows]] for f in names])
    return dataclasses.replace(w, shape=(len(rows), w.shape[1]), **dict(zip(names, picked)))
