"""``--prompt-cache-dir``: the server's prompt prefixes on disk, so that a restart still
serves a long repeated prefix (a system prompt, an agent's tools, a document) without
prefilling it again.

Policy. At start-up every ``*.safetensors`` file of the directory, newest first, is put
into the engine's prefix cache while it has room (``runner.prompt_cache.fill``); a file
that cannot be used (truncated, altered, of another model, KV dtype, block size or
geometry, or larger than the free cache) is skipped with a warning line on standard
error, and serving goes on. After a request ends, the cached prefix of its prompt is
written when it is at least ``min_tokens`` long and no file holds it yet (one file per
prefix, named by the hash of its last block; a file that already holds it is touched,
which makes it the newest). The directory is then kept under ``max_bytes`` by deleting
the least recently written or used files. The engine thread only copies
the prefix's KV rows out of the cache (``capture``, a memory copy) and hands them to a
writer thread, which converts, hashes and writes the file: a 4k-token prefix of the
default model (f32 KV, ~190 MB) takes about a second to write, which would otherwise
stall every running request's decode. At most ``max_pending`` copies wait for the
writer; a prefix that finds the queue full is not kept (a later request with it is).
``close`` writes what is pending.
"""
from __future__ import annotations

import os
import queue
import sys
import threading
from typing import Callable, List, Optional

from ..cache import BLOCK_SIZE, OutOfBlocksError
from ..cache.prompt_file import identity, read, write
from ..runner import prompt_cache as engine_cache
from ..runner.prefix_cache import prefix_keys

SUFFIX = ".safetensors"


def _warn(message: str) -> None:
    print(f"metalrt: warning: {message}", file=sys.stderr, flush=True)


class PromptCacheDir:
    """The prompt-cache files of ``directory`` (made when missing). ValueError for a
    path that is not a directory or a bound below 1."""

    def __init__(self, directory: str, min_tokens: int = 1024, max_bytes: int = 4 << 30,
                 warn: Callable[[str], None] = _warn, max_pending: int = 2):
        if max_pending < 1:
            raise ValueError(f"[serve] max_pending must be >= 1, got {max_pending}")
        if min_tokens < BLOCK_SIZE or max_bytes < 1:
            raise ValueError(f"[serve] --prompt-cache-min-tokens must be >= {BLOCK_SIZE} and "
                             f"--prompt-cache-max-bytes >= 1, got {min_tokens}, {max_bytes}")
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise ValueError(f"[serve] --prompt-cache-dir {directory}: {e.strerror or e}") \
                from None
        self.directory, self.min_tokens, self.max_bytes = directory, min_tokens, max_bytes
        self.warn = warn
        self.loaded = self.written = self.refused = 0
        self._pending: "queue.Queue" = queue.Queue(max_pending)
        self._paths = set()   # files queued, not written yet
        self._writer: Optional[threading.Thread] = None

    def _files(self) -> List[str]:
        """The cache files, newest first."""
        paths = [os.path.join(self.directory, n) for n in os.listdir(self.directory)
                 if n.endswith(SUFFIX)]
        return sorted(paths, key=lambda p: os.stat(p).st_mtime_ns, reverse=True)

    def load_into(self, engine) -> int:
        """Puts every usable file into ``engine``'s prefix cache; the files loaded."""
        expected = identity(engine.model, engine.cache)
        for path in self._files():
            try:
                prefix = read(path, expected)
                engine_cache.fill(engine, prefix, path)
            except (ValueError, OutOfBlocksError) as e:
                self.refused += 1
                self.warn(f"prompt cache file skipped: {e}")
                continue
            self.loaded += 1
        return self.loaded

    def save_from(self, engine, prompt) -> Optional[str]:
        """Queues the cached prefix of ``prompt`` (a finished request's) for writing when
        it is long enough and not on disk or queued yet; the file that holds or will hold
        it, or None. Returns once the KV rows are copied: the writer thread writes the
        file. An error writing is a warning: the request was already served."""
        if (len(prompt) - 1) // BLOCK_SIZE * BLOCK_SIZE < self.min_tokens:
            return None
        cached = engine_cache.cached_tokens(engine, prompt)
        if cached < self.min_tokens:
            return None
        path = os.path.join(self.directory,
                            prefix_keys(prompt[:cached])[-1].hex()[:32] + SUFFIX)
        if path in self._paths:
            return path
        if os.path.exists(path):
            try:
                os.utime(path)
            except OSError as e:   # deleted meanwhile, or the directory went away
                self.warn(f"prompt cache not touched in {self.directory}: {e.strerror or e}")
            return path
        if self._pending.full():
            return None
        prefix = engine_cache.capture(engine, prompt)
        self._paths.add(path)
        self._pending.put((path, prefix))
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_pending, daemon=True,
                                            name="metalrt-prompt-cache")
            self._writer.start()
        return path

    def close(self) -> None:
        """Writes the queued prefixes, then stops the writer thread."""
        if self._writer is not None:
            self._pending.put(None)
            self._writer.join()
            self._writer = None

    def _write_pending(self) -> None:
        while True:
            job = self._pending.get()
            if job is None:
                return
            path, prefix = job
            try:
                write(path, prefix)
                self.written += 1
                self._trim()
            except Exception as e:   # the writer lives on: close() waits for it
                reason = e.strerror if isinstance(e, OSError) and e.strerror else e
                self.warn(f"prompt cache not written in {self.directory}: {reason}")
            finally:
                self._paths.discard(path)

    def _trim(self) -> None:
        """Deletes the oldest files until the directory holds at most ``max_bytes``."""
        files = self._files()
        total = sum(os.path.getsize(p) for p in files)
        for path in reversed(files):
            if total <= self.max_bytes:
                break
            total -= os.path.getsize(path)
            os.remove(path)
