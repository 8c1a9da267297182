"""Prompt caches that outlive a generation and the process, with mlx-lm's names:
``make_prompt_cache``, ``save_prompt_cache``, ``load_prompt_cache``, and
``generate(..., prompt_cache=)`` / ``stream_generate(..., prompt_cache=)``.

Differences from mlx-lm, which follow from the paged KV cache:

* mlx-lm's cache is the history itself and ``prompt`` is only what follows it. Here
  ``prompt`` is always the whole prompt: the longest prefix of it (in whole 16-token
  blocks, at most up to its last token) that the cache holds is not prefilled, and the
  rest is. A prompt that shares nothing with the cache is simply prefilled in full, so
  the output never depends on what the cache holds (mlx-lm users passing only the new
  turn must pass the whole conversation instead).
* After a generation the cache holds the K/V of that prompt's full blocks (not of the
  generated tokens), replacing what it held.
* A cache belongs to one model and KV type: using or loading it with another raises
  ValueError naming the file and what differs (the model's file hash, KV dtype, block
  size or layer geometry); mlx-lm would fail later, or run on the wrong state.
* For a hybrid model (Gated-DeltaNet layers) the cache holds the attention layers'
  blocks and the recurrent state checkpointed at its last block (the runner's state
  checkpoints); only ``generate`` / ``stream_generate`` take a prompt cache, not
  ``batch_generate``.
"""
from __future__ import annotations

import os
from typing import Dict, Optional

from .cache import blocks_for
from .cache.prompt_file import PrefixState, identity, read, write
from .runner import prompt_cache as engine_cache


class PromptCache:
    """A prompt prefix's K/V (and a hybrid's state) in host memory, for one model.
    ``tokens``: the token ids it holds (a multiple of 16; empty before its first
    generation); ``metadata``: str -> str pairs saved with it; ``source``: the file it was
    loaded from, or None."""

    def __init__(self, model=None):
        self.model = model
        self.prefix: Optional[PrefixState] = None
        self.metadata: Dict[str, str] = {}
        self.source: Optional[str] = None

    @property
    def tokens(self):
        return list(self.prefix.tokens) if self.prefix else []

    @property
    def num_blocks(self) -> int:
        return blocks_for(len(self.tokens))

    def _where(self) -> str:
        return self.source or "the prompt cache"

    def fill(self, engine) -> int:
        """Puts the held prefix into ``engine``'s prefix cache; the tokens added (0 when
        empty). ValueError when it was made by another model or cache type."""
        if self.prefix is None:
            return 0
        return engine_cache.fill(engine, self.prefix, self._where())

    def update(self, engine, prompt) -> None:
        """Holds the cached prefix of ``prompt`` in ``engine`` (its last generation)."""
        prefix = engine_cache.capture(engine, prompt)
        if prefix is not None:
            self.prefix, self.source = prefix, None


def make_prompt_cache(model) -> PromptCache:
    """An empty prompt cache for ``model``, filled by the first ``generate`` it is
    passed to."""
    return PromptCache(model)


def save_prompt_cache(file_name: str, cache: PromptCache,
                      metadata: Optional[Dict[str, str]] = None) -> None:
    """Writes ``cache`` to ``file_name`` (safetensors; format in
    ``metalrt.cache.prompt_file``) with ``metadata`` (str -> str, kept by
    ``load_prompt_cache``). TypeError for something that is not a PromptCache;
    ValueError for an empty cache or metadata that is not str -> str."""
    if not isinstance(cache, PromptCache):
        raise TypeError(f"[prompt_cache] expected a PromptCache (make_prompt_cache), got "
                        f"{type(cache).__name__}")
    if cache.prefix is None:
        raise ValueError("[prompt_cache] the prompt cache holds no prefix yet: pass it to "
                         "generate(..., prompt_cache=) first")
    user = {**cache.metadata, **(metadata or {})}
    write(os.fspath(file_name), PrefixState(cache.prefix.tokens, cache.prefix.kv,
                                            cache.prefix.state, cache.prefix.identity, user))


def load_prompt_cache(file_name: str, return_metadata: bool = False, model=None):
    """The PromptCache saved in ``file_name`` (with ``return_metadata``: (cache,
    metadata)). ``model`` (not in mlx-lm): checked against it now rather than at the
    first ``generate`` (its KV dtype and geometry through the cache it makes).
    Raises FileNotFoundError for a missing file; ValueError naming the file for one that
    is truncated, altered, not a prompt cache, or (with ``model``) of another model or
    KV type."""
    file_name = os.fspath(file_name)
    if not os.path.isfile(file_name):
        raise FileNotFoundError(f"[prompt_cache] {file_name}: no such file")
    expected = None
    if model is not None:
        layout_cache = model.new_cache(1, window_blocks=None)   # as the engines of prompt caches
        expected = identity(model, layout_cache)
    prefix = read(file_name, expected)
    cache = PromptCache(model)
    cache.prefix, cache.metadata, cache.source = prefix, dict(prefix.metadata), file_name
    return (cache, dict(prefix.metadata)) if return_metadata else cache
