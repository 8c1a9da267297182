"""The progress of reading a model's weight files: one ``tqdm`` bar on standard error,
in bytes (SI prefixes) with the read rate.

What is counted is the bytes of the weight files (``*.safetensors`` or the ``.gguf``,
headers included) as ``file_map.map_file`` brings them into memory: on Linux it reads
each file into huge-page memory, which is where a multi-GB load spends its time; where
a file is mapped instead (macOS, ``METALRT_MMAP=1``) nothing is read at load and its
bytes count at once when it is mapped. ``file_map.map_file`` is the one place that
counts (``advance``); a loader opens the bar around its reads (``reading``).
"""
from __future__ import annotations

import contextlib
import os
import sys
from contextvars import ContextVar
from typing import Iterator, Optional, Sequence

from tqdm import tqdm

_BAR: ContextVar[Optional[tqdm]] = ContextVar("metalrt_load_progress", default=None)


@contextlib.contextmanager
def reading(files: Sequence[str], verbose: Optional[bool]) -> Iterator[None]:
    """A bar over the sizes of ``files`` while the block reads them. ``verbose``: True
    always shows it, None only when standard error is a terminal (tqdm's
    ``disable=None``), False never. TypeError for a ``verbose`` that is not a bool or
    None."""
    if verbose is not None and not isinstance(verbose, bool):
        raise TypeError(f"[load] verbose must be True, False or None, got {verbose!r}")
    if verbose is False:
        yield
        return
    total = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
    name = os.path.basename(os.path.dirname(files[0]) if len(files) > 1 else files[0])
    with tqdm(total=total, unit="B", unit_scale=True, desc=f"Loading {name}",
              file=sys.stderr, disable=None if verbose is None else False) as bar:
        token = _BAR.set(bar)
        try:
            yield
        finally:
            _BAR.reset(token)


def advance(nbytes: int) -> None:
    """Counts ``nbytes`` of a weight file as read (nothing when no bar is open)."""
    bar = _BAR.get()
    if bar is not None:
        bar.update(nbytes)
