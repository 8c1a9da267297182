"""One builder at a time for an entry of metalrt's cache, across processes.

tests/run.sh builds the slow fixtures in a background process (build_fixtures.py)
while the other gates run; a test that needs one meanwhile waits here for that build
and then finds it made, instead of making it a second time beside it (or installing
into the peers venv while pip is still writing there).
"""
from __future__ import annotations

import fcntl
from contextlib import contextmanager

from metalrt.default_model import cache_dir


@contextmanager
def held(entry: str):
    """Holds the lock of cache entry ``entry`` (a path relative to the cache) while the
    block runs. Not reentrant: a block must not take the same entry again."""
    lock = cache_dir() / f"{entry}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)   # released when the file is closed
        yield
