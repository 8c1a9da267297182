"""The paged KV cache of attention layers (vLLM's PagedAttention layout, Kwon et al.
2023).

Each attention layer owns a key and a value cache of shape ``[num_blocks, 16,
kv_heads, head_dim]`` (a quantized side: uint8 rows of blocks, ``kv_types``), addressed through the step's block tables and slot mapping
(``blocks``).
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np

import metalrt
from metalrt import huge_pages

from .blocks import BLOCK_SIZE
from .kv_types import parse_kv_type, storage

# The numpy element type that stores each cache dtype's bits (asarray(copy=False)).
_STORAGE = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16, "uint8": np.uint8}


class PagedKVLayer:
    """One attention layer's cache: ``keys`` and ``values``, each
    ``[num_blocks, 16, kv_heads, head_dim]``. Its blocks hold a token's K/V whatever
    request computed them, so requests with one prompt prefix can share its blocks."""

    num_slots = 0            # no per-request state: the blocks are the whole cache
    shares_prefixes = True

    def __init__(self, keys: "metalrt.Tensor", values: "metalrt.Tensor", window: int = 0,
                 kv_type: Tuple[str, str] = None):
        # window > 0: a sliding-window layer's own pool, read through the step's
        # window tables (``cache.window``); 0: the blocks of the shared block tables.
        self.keys, self.values, self.window = keys, values, int(window)
        # (key, value) cache types (kv_types.KV_TYPES); None: the tensors' dtypes.
        self.kv_type = tuple(kv_type) if kv_type else (keys.dtype, values.dtype)


def paged_kv_layers(num_layers: int, num_blocks: int, kv_heads: int, head_dim: int,
                    device: str, dtype="float32", window: int = 0) -> List[PagedKVLayer]:
    """The caches of ``num_layers`` attention layers on ``device``; ``dtype``: the cache
    type of both sides or a (key, value) pair (``kv_types.parse_kv_type``: a float dtype,
    "q8_0" or "q4_0").

    Memory: ``num_layers * num_blocks * 16 * kv_heads`` rows a side of
    ``kv_types.row_bytes`` each, zero-filled; ``window`` > 0 makes them sliding-window layers' own pools
    (``PagedKVLayer``). On a GPU each layer's side is its own buffer, since one
    Metal buffer cannot exceed ``maxBufferLength`` and a server's cache of every
    layer can (``device_info(device)["max_buffer_length"]``; RuntimeError naming it
    when one layer's side is larger). On the CPU there is one allocation a side with a
    view a layer; under
    Linux that allocation sits in 2 MB pages (``metalrt.huge_pages``): a decode step's
    attention reads each layer's context after the weights have streamed through the
    caches, and in 4 KB pages every page it touched was a TLB miss (the attention call
    of the default model 37.9 -> 31.8 us, docs/cpu.md). The price: a layer's memory is
    faulted in 2 MB at a time, so a large cache used sparsely (a short request in a
    server's 8,192-token cache) is resident 2 MB a layer and side sooner than in 4 KB
    pages (never more than the whole cache).
    """
    kv_type = parse_kv_type(dtype, head_dim, "float32")
    sides = [((num_layers, num_blocks, BLOCK_SIZE, kv_heads, width), side_dtype)
             for width, side_dtype in (storage(t, head_dim) for t in kv_type)]
    # Zero-filled so that no uninitialised bytes (possibly NaN) ever sit in a cache.
    # (A cache of no elements, e.g. a hybrid model with no attention layer, has no
    # pages to place.)
    if device != "cpu":
        return [PagedKVLayer(*(metalrt.zeros(shape[1:], side_dtype, device) for shape, side_dtype in sides),
                             window=window, kv_type=kv_type) for _ in range(num_layers)]
    keys, values = (_huge_page_side(shape, side_dtype)
                    if side_dtype in _STORAGE and huge_pages.available() and all(shape)
                    else metalrt.zeros(shape, side_dtype, device) for shape, side_dtype in sides)
    return [PagedKVLayer(keys[layer], values[layer], window, kv_type) for layer in range(num_layers)]


def _huge_page_side(shape, dtype: str) -> metalrt.Tensor:
    element = np.dtype(_STORAGE[dtype])
    memory = huge_pages.allocate(int(np.prod(shape)) * element.itemsize)   # zero-filled
    return metalrt.asarray(np.frombuffer(memory, element).reshape(shape), "cpu", dtype,
                           copy=False)
