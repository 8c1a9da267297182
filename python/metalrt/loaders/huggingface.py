"""Load a Hugging Face model directory: ``config.json``, ``*.safetensors`` (one file or
shards listed by ``model.safetensors.index.json``) and ``tokenizer.json``.

Tensors are read-only views of the files in their stored dtype under their
``transformers`` names. numpy has no bfloat16, so BF16 tensors are read as their
uint16 bit patterns (straight from the file, located by the safetensors header) and
widened exactly to float32.
MLX-format directories (``quantization`` in ``config.json``) keep their quantized
layers quantized (``mlx_quant.py``); mlx-lm's names and conventions are turned into
transformers' (``mlx_layout.py``).
"""
from __future__ import annotations

import json
import os
import struct
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open

from .. import buffer_windows
from . import load_progress
from .file_map import map_file
from .mlx_layout import to_transformers
from .mlx_quant import group_quantized

_INDEX = "model.safetensors.index.json"
_SINGLE = "model.safetensors"


def _read_json_object(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"[huggingface] {path}: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise ValueError(f"[huggingface] {path}: expected a JSON object, got {type(value).__name__}")
    return value


def _read_config(directory: str) -> dict[str, Any]:
    path = os.path.join(directory, "config.json")
    if not os.path.exists(path):
        raise ValueError(f"[huggingface] {directory}: missing config.json")
    return _read_json_object(path)


def safetensors_files(directory: str) -> list[str]:
    """The weight files of a model directory, in the index's order when sharded."""
    index = os.path.join(directory, _INDEX)
    if os.path.exists(index):
        weight_map = _read_json_object(index).get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
            raise ValueError(f"[huggingface] {index}: expected a 'weight_map' object of tensor "
                             f"name -> file name, got {type(weight_map).__name__}")
        return [os.path.join(directory, name) for name in dict.fromkeys(weight_map.values())]
    files = sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))
    if not files:
        raise ValueError(f"[huggingface] {directory}: no {_SINGLE} (or other *.safetensors) "
                         f"and no {_INDEX}")
    return [os.path.join(directory, n) for n in files]


def _header(path: str) -> tuple[dict[str, Any], int]:
    """(tensor name → header entry, byte offset of the data) of a safetensors file
    (u64 header length, JSON header, then the data); every entry's fields are checked
    and every tensor's range against the file's size, so that a truncated or corrupt
    tensor is named (the ``safetensors`` library reads the header after this)."""
    size = os.path.getsize(path)
    try:
        with open(path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            if header_len > size - 8:
                raise ValueError(f"the header claims {header_len} bytes, the file has {size}")
            header = json.loads(f.read(header_len))
    except (struct.error, ValueError) as e:
        raise ValueError(f"[safetensors] {path}: not a safetensors file ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"[safetensors] {path}: not a safetensors file (the header is a JSON "
                         f"{type(header).__name__}, expected an object)")
    header.pop("__metadata__", None)
    data_start = 8 + header_len
    for name, entry in header.items():
        _check_entry(path, name, entry)
        begin, end = entry["data_offsets"]
        if data_start + end > size:
            raise ValueError(f"[safetensors] {path}: tensor '{name}' needs bytes "
                             f"[{data_start + begin}, {data_start + end}) but the file has "
                             f"{size} bytes; it is truncated")
    return header, data_start


def _check_entry(path: str, name: str, entry: Any) -> None:
    """ValueError unless ``entry`` is {"dtype": str, "shape": [int >= 0, ...],
    "data_offsets": [begin, end] with 0 <= begin <= end} (the safetensors format)."""
    def is_count(v):
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0
    offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
    shape = entry.get("shape") if isinstance(entry, dict) else None
    if (not isinstance(entry, dict) or not isinstance(entry.get("dtype"), str)
            or not isinstance(shape, list) or not all(is_count(d) for d in shape)
            or not isinstance(offsets, list) or len(offsets) != 2
            or not all(is_count(o) for o in offsets) or offsets[0] > offsets[1]):
        raise ValueError(f"[safetensors] {path}: tensor '{name}' has a corrupt header entry "
                         f"{entry!r}; expected dtype (a string), shape (non-negative ints) and "
                         f"data_offsets [begin, end] with 0 <= begin <= end")


# safetensors dtypes → numpy; every tensor is a read-only view of the file (BF16 as its
# uint16 bits, widened to float32 after: numpy has no bfloat16).
_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
           "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
           "U64": np.uint64, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8, "BOOL": np.bool_}


def _mapped_tensor(path: str, mapping: memoryview, name: str, entry: dict[str, Any],
                   data_start: int) -> np.ndarray:
    if entry["dtype"] not in _DTYPES:
        raise ValueError(f"[safetensors] {path}: tensor '{name}' has dtype {entry['dtype']}; "
                         f"supported dtypes are {', '.join(_DTYPES)}")
    begin, end = entry["data_offsets"]
    dtype = np.dtype(_DTYPES[entry["dtype"]]).newbyteorder("<")
    count = int(np.prod(entry["shape"]))
    if end - begin != dtype.itemsize * count:
        raise ValueError(f"[safetensors] {path}: tensor '{name}' has {end - begin} bytes for "
                         f"shape {entry['shape']} of {entry['dtype']}")
    return np.frombuffer(mapping, dtype=dtype, count=count,
                         offset=data_start + begin).reshape(entry["shape"])


def read_safetensors(path: str) -> dict[str, tuple[np.ndarray, str]]:
    """All tensors of one safetensors file: name → (read-only view of the file in the
    stored dtype, safetensors dtype name); BF16 tensors are their uint16 bit patterns
    (``mlx_quant.group_quantized`` widens those that are not scales). The header is validated by the
    ``safetensors`` library; the views are mapped here because it copies every tensor
    it returns. Raises ValueError naming the file (and the tensor when one is truncated
    or inconsistent)."""
    header, data_start = _header(path)
    try:
        with safe_open(path, framework="numpy"):
            pass
    except SafetensorError as e:
        raise ValueError(f"[safetensors] {path}: {e}") from None
    mapping = map_file(path)   # one buffer per file: a device wraps it once (or in runs of tensors)
    tensors = {name: (_mapped_tensor(path, mapping, name, entry, data_start), entry["dtype"])
               for name, entry in header.items()}
    buffer_windows.register(mapping, [(data_start + begin, data_start + end) for begin, end in
                                      (entry["data_offsets"] for entry in header.values())])
    return tensors


def load_huggingface(directory: str | os.PathLike,
                     verbose: bool | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(config, weights)`` of a Hugging Face model directory; the layers of an MLX
    quantized model are ``QuantizedWeight``s under ``<layer>.weight`` (see
    ``mlx_quant.group_quantized``; their bf16 scales stay uint16 bit patterns), float
    tensors are views in their stored dtype but BF16, widened to float32. Raises ValueError naming the directory or file (and
    the tensor) when ``config.json`` or the weights are missing, corrupt or
    inconsistent with the ``quantization`` entry. ``verbose``: the progress bar of the
    reads (``load_progress.reading``)."""
    directory = os.fspath(directory)
    config = _read_config(directory)
    weights: dict[str, tuple[str, np.ndarray, str]] = {}
    files = safetensors_files(directory)
    with load_progress.reading(files, verbose):
        for path in files:
            if not os.path.exists(path):
                raise ValueError(f"[huggingface] {directory}: {_INDEX} lists "
                                 f"{os.path.basename(path)}, which does not exist")
            weights.update((name, (path, *t)) for name, t in read_safetensors(path).items())
    grouped = group_quantized(config, weights, os.path.join(directory, "config.json"))
    return config, to_transformers(grouped)
