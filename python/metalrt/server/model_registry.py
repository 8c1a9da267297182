"""The models one server serves (``--model`` given more than once, or a directory of
models): served ids mapped to model paths, each loaded on first use into its own
engine, and evicted least recently used when loading another one would exceed
``--max-memory``.

A model's memory is its weight files' bytes on disk plus its KV cache's bytes (the
cache tensors made for ``--kv-cache-tokens``), measured when it loads. Before its
first load only the weights are known, so room is made for them, and then once more
for the measured total (the new model is unloaded again, 503, when that room cannot
be made). A model with requests queued or running is never evicted.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(I?B)?", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class UnknownModelError(LookupError):
    """A request names a model the server does not serve (HTTP 404)."""


class ModelUnavailableError(RuntimeError):
    """The model cannot be loaded now: the memory it needs is held by models with
    requests in flight, or it is bigger than the whole budget (HTTP 503)."""


def parse_bytes(text: str) -> int:
    """``--max-memory``: bytes as ``N`` or ``N`` with a binary suffix ``K``, ``M``,
    ``G`` or ``T`` (1024-based; ``B``/``iB`` after it allowed, case ignored): ``8G``,
    ``1.5GiB``, ``512m``. argparse.ArgumentTypeError (a CLI error) for anything else
    or a size that is not positive."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"expected a size such as 8G, 512M or 1073741824, "
                                         f"got {text!r}")
    size = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if size <= 0:
        raise argparse.ArgumentTypeError(f"the size must be positive, got {text!r}")
    return size


def model_id(path: Optional[str]) -> str:
    """The id a model is served under by default: its file or directory name without
    .gguf (the default model's file name for None)."""
    from ..default_model import FILENAME

    name = os.path.basename(os.path.normpath(path)) if path else FILENAME
    return name[:-len(".gguf")] if name.endswith(".gguf") else name


def _is_model(path: str) -> bool:
    if os.path.isfile(path):
        return path.endswith(".gguf")
    return os.path.isdir(path) and (
        os.path.exists(os.path.join(path, "config.json"))
        or sum(n.endswith(".gguf") for n in os.listdir(path)) == 1)


def model_entries(specs: Optional[Sequence[str]]) -> Dict[str, Optional[str]]:
    """``--model`` values -> {served id: path}, in the order given. A value is a model
    (a .gguf, a Hugging Face directory, a directory with one .gguf), ``ID=PATH`` to
    serve it as ``ID``, or a directory of models (one of each model in it, by name).
    No value: the default model. ValueError for a path that does not exist, a
    directory with no model in it, or one id given twice."""
    if not specs:
        return {model_id(None): None}
    entries: Dict[str, Optional[str]] = {}
    for spec in specs:
        name, path = None, spec
        if "=" in spec and not os.path.exists(spec):
            name, path = spec.split("=", 1)
        if not os.path.exists(path):
            raise ValueError(f"[serve] --model {spec}: no such file or directory")
        if _is_model(path):
            found: List[Tuple[str, str]] = [(name or model_id(path), path)]
        else:
            found = [(model_id(p), p) for p in (os.path.join(path, n)
                                                for n in sorted(os.listdir(path))) if _is_model(p)]
            if not found or name is not None:
                raise ValueError(f"[serve] --model {spec}: expected a model (a .gguf, a "
                                 f"directory with config.json or one .gguf) or, without "
                                 f"ID=, a directory of models")
        for served, where in found:
            if served in entries:
                raise ValueError(f"[serve] the model id '{served}' is given twice ({entries[served]} "
                                 f"and {where}); name one with --model ID=PATH")
            entries[served] = where
    return entries


def weight_bytes(path: str) -> int:
    """Bytes of a model's weight files: a .gguf's size, or a directory's *.gguf and
    *.safetensors files."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path)
               if n.endswith((".gguf", ".safetensors")))


class ModelRegistry:
    """``paths``: {served id: model path} (None: the default model); ``load(id, path)``
    returns a loaded model (``served_model.ServedModel``: ``busy``, ``memory_bytes``,
    ``close()``), called on a worker thread, one load at a time. ``max_memory``: the
    budget in bytes of all loaded models together (None: no limit, nothing evicted)."""

    def __init__(self, paths: Dict[str, Optional[str]], load: Callable, max_memory: Optional[int] = None):
        if max_memory is not None and max_memory <= 0:
            raise ValueError(f"[serve] --max-memory must be positive, got {max_memory}")
        self.paths, self.max_memory, self._load = dict(paths), max_memory, load
        # Least recently used first.
        self.loaded: "collections.OrderedDict[str, object]" = collections.OrderedDict()
        self._measured: Dict[str, int] = {}   # memory_bytes of each model's last load
        self._lock = asyncio.Lock()

    @property
    def ids(self) -> List[str]:
        return list(self.paths)

    def load_now(self, name: str):
        """Loads ``name`` on this thread (the first model, at start-up). ValueError
        when it alone is bigger than ``max_memory``."""
        served = self._load(name, self.paths[name])
        try:
            self._make_room(name, served.memory_bytes)
        except ModelUnavailableError as e:
            served.close()
            raise ValueError(str(e)) from None
        self._measured[name] = served.memory_bytes
        self.loaded[name] = served
        return served

    async def acquire(self, name: str):
        """The loaded model served as ``name``, loading it first when it is not (one
        load at a time; concurrent first requests share it), and marked most recently
        used. The caller submits its request before its next ``await``: an idle model
        may be evicted at any await. Raises UnknownModelError, ModelUnavailableError."""
        if name not in self.paths:
            served = "', '".join(self.paths)
            raise UnknownModelError(f"the model '{name}' does not exist; this server serves "
                                    f"'{served}'")
        if name not in self.loaded:
            async with self._lock:
                if name not in self.loaded:
                    await self._load_making_room(name)
        self.loaded.move_to_end(name)
        return self.loaded[name]

    async def _load_making_room(self, name: str) -> None:
        path = self.paths[name]
        self._make_room(name, self._measured.get(name) or weight_bytes(path))
        served = await asyncio.to_thread(self._load, name, path)
        self._measured[name] = served.memory_bytes
        try:
            self._make_room(name, served.memory_bytes)
        except ModelUnavailableError:
            served.close()
            raise
        self.loaded[name] = served

    def _make_room(self, name: str, needed: int) -> None:
        """Evicts idle models, least recently used first, until ``needed`` more bytes
        fit ``max_memory``; ModelUnavailableError when they cannot."""
        budget = self.max_memory
        if budget is None:
            return
        if needed > budget:
            raise ModelUnavailableError(f"the model '{name}' needs {needed} bytes (weights + "
                                        f"KV cache), more than --max-memory ({budget} bytes)")
        for victim in list(self.loaded):
            if self._used() + needed <= budget:
                return
            if not self.loaded[victim].busy:
                self.loaded.pop(victim).close()
        if self._used() + needed > budget:
            held = ", ".join(f"'{k}' ({m.memory_bytes} bytes)" for k, m in self.loaded.items())
            raise ModelUnavailableError(
                f"the model '{name}' ({needed} bytes) does not fit --max-memory ({budget} "
                f"bytes) while {held} serve requests; retry when they finish")

    def _used(self) -> int:
        return sum(m.memory_bytes for m in self.loaded.values())

    def close(self) -> None:
        while self.loaded:
            self.loaded.popitem()[1].close()
