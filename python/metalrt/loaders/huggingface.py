"""Load a Hugging Face model directory: ``config.json``, ``*.safetensors`` (one file or
shards listed by ``model.safetensors.index.json``) and ``tokenizer.json``.

Floating-point tensors become float32 numpy arrays under their ``transformers`` names.
numpy has no bfloat16, so BF16 tensors are read as their uint16 bit patterns (straight
from the file, located by the safetensors header) and widened exactly to float32.
"""
from __future__ import annotations

import json
import os
import struct
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open

from .quants import bf16_to_float32

_INDEX = "model.safetensors.index.json"
_SINGLE = "model.safetensors"


def _read_config(directory: str) -> dict[str, Any]:
    path = os.path.join(directory, "config.json")
    if not os.path.exists(path):
        raise ValueError(f"[huggingface] {directory}: missing config.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"[huggingface] {path}: not valid JSON ({e})") from None


def safetensors_files(directory: str) -> list[str]:
    """The weight files of a model directory, in the index's order when sharded."""
    index = os.path.join(directory, _INDEX)
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
        return [os.path.join(directory, name) for name in dict.fromkeys(weight_map.values())]
    files = sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))
    if not files:
        raise ValueError(f"[huggingface] {directory}: no {_SINGLE} (or other *.safetensors) "
                         f"and no {_INDEX}")
    return [os.path.join(directory, n) for n in files]


def _bf16_tensor(path: str, header: dict[str, Any], data_start: int, name: str) -> np.ndarray:
    entry = header[name]
    begin, end = entry["data_offsets"]
    bits = np.memmap(path, dtype=np.uint16, mode="r", offset=data_start + begin,
                     shape=((end - begin) // 2,))
    return bf16_to_float32(bits).reshape(entry["shape"])


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    """All tensors of one safetensors file; floating point ones as float32."""
    out: dict[str, np.ndarray] = {}
    try:
        with safe_open(path, framework="numpy") as f:
            names = list(f.keys())
            dtypes = {name: f.get_slice(name).get_dtype() for name in names}
            for name in names:
                if dtypes[name] != "BF16":
                    t = f.get_tensor(name)
                    out[name] = t.astype(np.float32) if t.dtype.kind == "f" else t
    except SafetensorError as e:
        raise ValueError(f"[safetensors] {path}: {e}") from None
    if "BF16" in dtypes.values():
        # The safetensors format: u64 header length, JSON header, then the data.
        with open(path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(header_len))
        for name in names:
            if dtypes[name] == "BF16":
                out[name] = _bf16_tensor(path, header, 8 + header_len, name)
    return out


def load_huggingface(directory: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(config, weights)`` of a Hugging Face model directory. Raises ValueError naming
    the directory or file when ``config.json`` or the weights are missing or corrupt."""
    directory = os.fspath(directory)
    config = _read_config(directory)
    weights: dict[str, np.ndarray] = {}
    for path in safetensors_files(directory):
        if not os.path.exists(path):
            raise ValueError(f"[huggingface] {directory}: {_INDEX} lists "
                             f"{os.path.basename(path)}, which does not exist")
        weights.update(read_safetensors(path))
    return config, weights
