"""The bytes of a model file as the loaders' zero-copy tensor views see them.

A decode step streams every weight once per token, so the pages the weights sit in
are on its critical path. A read-only file mapping gives 4 KB page-cache pages: on
x86-64 a token of the default model (97 MB) then walks ~24,000 TLB misses, and the
hardware prefetchers stop at every 4 KB boundary. On Linux the file is therefore read
into anonymous memory advised ``MADV_HUGEPAGE`` and aligned to 2 MB, which the kernel
backs with 2 MB pages (transparent huge pages in their default "madvise" mode). The
resident set is the same as a file mapping's once every weight has been read (each
page of the file once); the load reads the whole file up front (a page-cache copy,
~40 ms for the default model). Measured in docs/cpu.md ("Weight memory").

Elsewhere (macOS, where Apple silicon's pages are 16 KB and the Metal device wraps the
mapped file's pages without a copy), on a kernel without ``MADV_HUGEPAGE``, or with
``METALRT_MMAP=1`` (a model larger than the free memory, say), the file is mapped
read-only, as llama.cpp does by default (its ``--no-mmap`` is the other way).
"""
from __future__ import annotations

import contextlib
import mmap
import os
from contextvars import ContextVar
from typing import Iterator

from .. import huge_pages
from . import load_progress

_MAPPED: ContextVar[bool] = ContextVar("metalrt_file_mapping", default=False)

# Read in slices so that the load's progress bar moves (the copy is the same).
_CHUNK = 64 << 20


def use_file_mapping() -> bool:
    """True when model files are mapped rather than read into huge-page memory:
    ``METALRT_MMAP=1``, inside ``mapped()``, or no ``MADV_HUGEPAGE`` on this platform.
    ValueError for a ``METALRT_MMAP`` other than unset, "0" or "1"."""
    value = os.environ.get("METALRT_MMAP", "")
    if value not in ("", "0", "1"):
        raise ValueError(f"METALRT_MMAP must be 0 or 1, got {value!r}")
    return value == "1" or _MAPPED.get() or not huge_pages.available()


@contextlib.contextmanager
def mapped() -> Iterator[None]:
    """Files opened in the block are mapped, whatever the platform: for a process that
    reads a part of a model only (a pipeline stage's layers, a driver's config and
    tokenizer), whose resident set is then the pages it reads."""
    token = _MAPPED.set(True)
    try:
        yield
    finally:
        _MAPPED.reset(token)


def map_file(path: str) -> memoryview:
    """The whole file at ``path`` as a read-only memoryview whose ``obj`` is an
    ``mmap.mmap`` (``np.frombuffer`` views of it share that owner, so views of
    adjacent tensors can be merged without a copy). OSError if the file cannot be read,
    ValueError for an empty file (nothing to map) or a bad ``METALRT_MMAP``."""
    size = os.path.getsize(path)
    if size == 0:
        raise ValueError(f"{path}: the file is empty")
    with open(path, "rb") as f:
        if use_file_mapping():
            mapping = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)).toreadonly()
            load_progress.advance(size)
            return mapping
        view = huge_pages.allocate(size)
        read = 0
        while read < size:
            n = f.readinto(view[read:read + _CHUNK])
            if not n:
                raise OSError(f"{path}: the file shrank while it was read ({read} of {size} bytes)")
            read += n
            load_progress.advance(n)
        return view.toreadonly()
