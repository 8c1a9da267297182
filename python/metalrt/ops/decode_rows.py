"""Decode rows (batch invariance): inside ``with decode_rows():`` every op called on this
thread computes each row of its inputs with the arithmetic of a one-row decode step, so a
row's result does not depend on the rows beside it. The providers that tie a row to its
neighbours by blocking or rounding (the CPU's prefill GEMMs and prefill attention) decline,
and the decode providers (the quantized GEMV, the decode attention; the oracle for float
weights) serve any row count. The runner sets it for its steps of short chunks (decodes,
speculative verify steps, short prompt chunks), which is what makes greedy speculative
decoding give plain decoding's tokens and a seeded request its text beside other requests.
A plan recorded inside it replays under it. C++: ``DecodeRowsScope``
(cpp/include/metalrt/op_registry.h)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from .._metalrt import providers as _providers


@contextmanager
def decode_rows(on: bool = True) -> Iterator[None]:
    """Sets this thread's decode-rows setting to ``on`` (a bool) for the ``with`` block,
    then restores the previous one (blocks nest). TypeError for a non-bool."""
    if not isinstance(on, bool):
        raise TypeError(f"[decode_rows] on must be a bool, got {type(on).__name__}")
    previous = _providers.set_decode_rows(on)
    try:
        yield
    finally:
        _providers.set_decode_rows(previous)
