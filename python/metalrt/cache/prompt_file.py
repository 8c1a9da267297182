"""A prompt prefix's cache as a safetensors file: its tokens, the K/V of its full blocks
for every attention layer and, for a hybrid model, the recurrent state after it, with
the identity of the model and cache that computed them.

Tensors: ``tokens`` int32 [n] (n a multiple of BLOCK_SIZE); ``layer.I.keys`` /
``layer.I.values`` [n / 16, 16, kv_heads, head_dim] for attention layer I (float32 or
float16 as the cache holds them; a bfloat16 cache's bits as uint16; a q8_0 / q4_0 side's
blocks as uint8 [n / 16, 16, kv_heads, row bytes], ``kv_types``); ``layer.I.conv`` /
``layer.I.recurrent`` [1, ...] for a Gated-DeltaNet layer I (``ModelCache.snapshot``).

Metadata (all strings): ``metalrt.format``; ``metalrt.model_hash`` and
``metalrt.model_name`` (``model_hash``); ``metalrt.kv_dtype`` (the KV cache type,
``kv_type_name``: a file of another type is refused); ``metalrt.block_size``;
``metalrt.layers`` (JSON: each layer's cache geometry); ``metalrt.digest``: sha256 over
the other metadata and every tensor's bytes, so a truncated, edited or bit-flipped file
is refused rather than read as K/V. Any other key is the caller's (mlx-lm's
``metadata``).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from .blocks import BLOCK_SIZE

FORMAT = "metalrt-prompt-cache/1"
_PREFIX = "metalrt."
_SAMPLE = 1 << 20     # bytes hashed at each end of a model file


def model_hash(source: Optional[str]) -> str:
    """A hash naming the model files at ``source`` (a .gguf file or a model directory:
    its config.json, *.safetensors and *.gguf): sha256 over each file's name, size, first
    and last MiB. Not a full hash: a full sha256 of a many-GB model would cost seconds at
    every start; a different model, quantization or fine-tune differs in its header
    (GGUF metadata and tensor table, safetensors' header), size or end. The modification
    time is left out so that a copied model keeps its caches. "none" when the model was
    not loaded from files."""
    if source is None:
        return "none"
    if os.path.isdir(source):
        files = sorted(os.path.join(source, n) for n in os.listdir(source)
                       if n == "config.json" or n.endswith((".safetensors", ".gguf")))
    else:
        files = [source]
    digest = hashlib.sha256()
    for path in files:
        size = os.path.getsize(path)
        digest.update(f"{os.path.basename(path)}:{size}:".encode())
        with open(path, "rb") as f:
            digest.update(f.read(_SAMPLE))
            if size > _SAMPLE:
                f.seek(max(_SAMPLE, size - _SAMPLE))
                digest.update(f.read(_SAMPLE))
    return digest.hexdigest()


def cache_layout(cache) -> List[list]:
    """Each layer's cache geometry (JSON-able): ["kv", key rows [16, kv_heads, width],
    key dtype, value rows, value dtype] for a paged attention layer (width: head_dim, or a
    quantized side's row bytes, dtype uint8), ["state", conv rows, conv dtype, recurrent rows] for a
    recurrent one."""
    layout = []
    for layer in cache.layers:
        if layer.num_slots:
            layout.append(["state", list(layer.conv.shape[1:]), layer.conv.dtype,
                           list(layer.recurrent.shape[1:])])
        else:
            layout.append(["kv", list(layer.keys.shape[1:]), layer.keys.dtype,
                           list(layer.values.shape[1:]), layer.values.dtype])
    return layout


def kv_type_name(kv_type) -> str:
    """A (key, value) cache type as the file names it: "q8_0", or "q8_0,float16" when the
    sides differ."""
    return kv_type[0] if kv_type[0] == kv_type[1] else ",".join(kv_type)


def identity(model, cache) -> Dict[str, str]:
    """The metadata a prompt cache of ``model`` over ``cache`` must carry to be used."""
    kv = [layer for layer in cache.layers if not layer.num_slots]
    return {_PREFIX + "format": FORMAT,
            _PREFIX + "model_hash": model_hash(getattr(model, "source", None)),
            _PREFIX + "model_name": os.path.basename(str(getattr(model, "source", None))),
            _PREFIX + "kv_dtype": kv_type_name(kv[0].kv_type) if kv else "none",
            _PREFIX + "block_size": str(BLOCK_SIZE),
            _PREFIX + "layers": json.dumps(cache_layout(cache))}


def mismatch(found: Dict[str, str], expected: Dict[str, str]) -> Optional[str]:
    """What differs between a file's identity and the model's, None when nothing."""
    names = {"format": "format", "model_hash": "model", "kv_dtype": "KV type",
             "block_size": "block size", "layers": "layer geometry"}
    for key, what in names.items():
        key = _PREFIX + key
        if found.get(key) != expected[key]:
            if key.endswith("model_hash"):
                return (f"it was made by another model ({found.get(_PREFIX + 'model_name')}, "
                        f"hash {str(found.get(key))[:12]}) than this one "
                        f"({expected[_PREFIX + 'model_name']}, hash {expected[key][:12]})")
            return f"its {what} is {found.get(key)!r}, this model's cache has {expected[key]!r}"
    return None


@dataclass
class PrefixState:
    """A prefix in host memory: ``tokens`` (a whole number of blocks), ``kv`` {layer
    index: (keys, values)} numpy [blocks, 16, kv_heads, head_dim] each in the layer's
    host dtype (float32 for a bfloat16 cache), ``state`` the recurrent-state snapshot
    after it (hybrid models, else None), ``identity`` of the model and cache that made
    it, ``metadata`` the caller's string pairs."""

    tokens: List[int]
    kv: Dict[int, Tuple[np.ndarray, np.ndarray]]
    state: Optional[list]
    identity: Dict[str, str]
    metadata: Dict[str, str] = field(default_factory=dict)


def _digest(metadata: Dict[str, str], tensors: Dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256(json.dumps(sorted(metadata.items())).encode())
    for name in sorted(tensors):
        array = np.ascontiguousarray(tensors[name])
        digest.update(f"{name}:{array.dtype.str}:{array.shape}".encode())
        digest.update(array.data)
    return digest.hexdigest()


def _to_file(array: np.ndarray, dtype: str) -> np.ndarray:
    # bfloat16 values read back as float32: their top 16 bits are the exact value.
    return (array.view(np.uint32) >> 16).astype(np.uint16) if dtype == "bfloat16" else array


def _from_file(array: np.ndarray, dtype: str) -> np.ndarray:
    return (array.astype(np.uint32) << 16).view(np.float32) if dtype == "bfloat16" else array


def write(path: str, prefix: PrefixState) -> None:
    """Writes ``prefix`` to ``path`` (atomically: a reader sees the old file or the whole
    new one). ValueError for user metadata that is not str -> str or uses the
    ``metalrt.`` keys."""
    from safetensors.numpy import save_file

    for key, value in prefix.metadata.items():
        if not isinstance(key, str) or not isinstance(value, str) or key.startswith(_PREFIX):
            raise ValueError(f"[prompt_cache] metadata must map str to str, without "
                             f"'{_PREFIX}' keys; got {key!r}: {value!r}")
    layout = json.loads(prefix.identity[_PREFIX + "layers"])
    tensors = {"tokens": np.asarray(prefix.tokens, np.int32)}
    for i, (keys, values) in prefix.kv.items():
        tensors[f"layer.{i}.keys"] = _to_file(keys, layout[i][2])
        tensors[f"layer.{i}.values"] = _to_file(values, layout[i][4])
    stateful = [i for i, entry in enumerate(layout) if entry[0] == "state"]
    for i, (conv, recurrent) in zip(stateful, prefix.state or ()):
        tensors[f"layer.{i}.conv"], tensors[f"layer.{i}.recurrent"] = conv, recurrent
    metadata = {**prefix.metadata, **prefix.identity}
    metadata[_PREFIX + "digest"] = _digest(metadata, tensors)
    tmp = f"{path}.tmp{os.getpid()}"
    save_file(tensors, tmp, metadata=metadata)
    os.replace(tmp, path)


def read_identity(path: str) -> Dict[str, str]:
    """The metadata of the prompt-cache file ``path`` (its header only). ValueError
    naming the file when it is truncated, not a safetensors file or not a prompt cache."""
    from safetensors import safe_open

    try:
        with safe_open(path, "np") as f:
            metadata = f.metadata() or {}
    except Exception as e:   # safetensors raises its own error types for a bad header
        raise ValueError(f"[prompt_cache] {path} is truncated or not a safetensors file: {e}") \
            from None
    if metadata.get(_PREFIX + "format") != FORMAT:
        raise ValueError(f"[prompt_cache] {path} is not a metalrt prompt cache (format "
                         f"{metadata.get(_PREFIX + 'format')!r}, expected {FORMAT!r})")
    return metadata


def read(path: str, expected: Optional[Dict[str, str]] = None) -> PrefixState:
    """The prefix in ``path``. ValueError naming the file and what is wrong: not a prompt
    cache, truncated or altered (the digest or a tensor's shape does not match), or,
    with ``expected`` (``identity``), made for another model or cache (which differs)."""
    from safetensors.numpy import load_file

    metadata = read_identity(path)
    if expected is not None:
        reason = mismatch(metadata, expected)
        if reason:
            raise ValueError(f"[prompt_cache] {path} is refused: {reason}")
    try:
        tensors = load_file(path)
    except Exception as e:
        raise ValueError(f"[prompt_cache] {path} is truncated or not a safetensors file: {e}") from None
    stored = {k: v for k, v in metadata.items() if k != _PREFIX + "digest"}
    if _digest(stored, tensors) != metadata.get(_PREFIX + "digest"):
        raise ValueError(f"[prompt_cache] {path} is refused: its digest does not match its "
                         "contents (the file was altered or damaged)")
    layout = json.loads(metadata[_PREFIX + "layers"])
    tokens = [int(t) for t in tensors.get("tokens", ())]
    blocks = len(tokens) // BLOCK_SIZE
    kv, state = {}, []
    try:
        for i, entry in enumerate(layout):
            if entry[0] == "kv":
                kv[i] = tuple(_from_file(tensors[f"layer.{i}.{side}"], entry[column])
                              for side, column in (("keys", 2), ("values", 4)))
            else:
                state.append((tensors[f"layer.{i}.conv"], tensors[f"layer.{i}.recurrent"]))
    except KeyError as e:
        raise ValueError(f"[prompt_cache] {path} is refused: tensor {e} is missing") from None
    if not tokens or len(tokens) % BLOCK_SIZE or any(
            side.shape != (blocks, *layout[i][column]) for i in kv
            for side, column in zip(kv[i], (1, 3))):
        raise ValueError(f"[prompt_cache] {path} is refused: its {len(tokens)} tokens do not "
                         "fill the blocks its K/V tensors hold")
    user = {k: v for k, v in metadata.items() if not k.startswith(_PREFIX)}
    return PrefixState(tokens, kv, state or None,
                       {k: v for k, v in metadata.items() if k.startswith(_PREFIX)
                        and k != _PREFIX + "digest"}, user)
