"""Zero-copy reader of the GGUF container: header, metadata, tensor infos, tensor data.

Layout (GGUF v2/v3, little-endian; the spec is ggml's docs/gguf.md): magic ``GGUF``,
u32 version, u64 tensor count, u64 metadata count, the metadata key/value pairs, the
tensor infos (name, dims with the contiguous dimension first, GGML type, offset), then
the tensor data starting at the next multiple of ``general.alignment`` (default 32).

We parse this ourselves instead of using ``gguf.GGUFReader`` because that reader builds
a numpy view per array element while opening (over 5 s for the default model's 100k
tokenizer strings on our machines) and reports truncated or corrupt files as numpy
reshape errors. Here every read is bounds-checked, so a bad file raises a ``ValueError``
naming the file, the key or tensor, and what was expected. Tensor data are read-only
views of the file's bytes (``file_map.map_file``: huge-page memory on Linux, a memory
map elsewhere) until they are dequantized.
"""
from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType, GGUFValueType

from .. import buffer_windows
from .file_map import map_file

_MAGIC = b"GGUF"
_SUPPORTED_VERSIONS = (2, 3)
# Arrays of arrays deeper than this are a corrupt file (llama.cpp writes none nested).
_MAX_ARRAY_NESTING = 8

# Metadata value types as struct format characters (standard sizes, little-endian);
# numpy spells them the same way for arrays.
_FORMATS = {
    GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H", GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i",
    GGUFValueType.UINT64: "Q", GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT32: "f", GGUFValueType.FLOAT64: "d",
    GGUFValueType.BOOL: "?",
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file.

    ``shape`` is in numpy (row-major) order, i.e. GGUF's dims reversed; ``offset`` is
    the absolute byte offset of the data in the file.
    """

    name: str
    shape: tuple[int, ...]
    ggml_type: GGMLQuantizationType
    offset: int
    nbytes: int


class _Cursor:
    """Bounds-checked little-endian reads over the mapped file."""

    def __init__(self, path: str, buf: memoryview):
        self.path = path
        self.buf = buf
        self.pos = 0

    def _check(self, n: int, what: str) -> int:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise ValueError(
                f"[gguf] {self.path}: truncated or corrupt: {what} needs bytes "
                f"[{self.pos}, {end}) but the file has {len(self.buf)} bytes")
        start, self.pos = self.pos, end
        return start

    def take(self, n: int, what: str) -> bytes:
        start = self._check(n, what)
        return bytes(self.buf[start:start + n])

    def array(self, fmt: str, count: int, what: str) -> np.ndarray:
        dtype = np.dtype("<" + fmt)
        start = self._check(count * dtype.itemsize, what)
        return np.frombuffer(self.buf, dtype=dtype, count=count, offset=start).copy()

    def scalar(self, fmt: str, what: str) -> Any:
        start = self._check(struct.calcsize("<" + fmt), what)
        return struct.unpack_from("<" + fmt, self.buf, start)[0]

    def u32(self, what: str) -> int:
        return self.scalar("I", what)

    def u64(self, what: str) -> int:
        return self.scalar("Q", what)

    def string(self, what: str) -> str:
        raw = self.take(self.u64(what), what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"[gguf] {self.path}: {what} is not valid UTF-8 ({e})") from None

    def value_type(self, what: str) -> GGUFValueType:
        raw = self.u32(what)
        try:
            return GGUFValueType(raw)
        except ValueError:
            raise ValueError(f"[gguf] {self.path}: {what} has unknown value type {raw}") from None

    def value(self, vtype: GGUFValueType, what: str, depth: int = 0) -> Any:
        if vtype == GGUFValueType.STRING:
            return self.string(what)
        if vtype == GGUFValueType.ARRAY:
            # A corrupt file can nest arrays 12 bytes a level: bound the recursion.
            if depth >= _MAX_ARRAY_NESTING:
                raise ValueError(f"[gguf] {self.path}: truncated or corrupt: {what} nests arrays "
                                 f"more than {_MAX_ARRAY_NESTING} deep")
            item_type = self.value_type(what)
            count = self.u64(what)
            if item_type == GGUFValueType.STRING:
                return [self.string(what) for _ in range(count)]
            if item_type == GGUFValueType.ARRAY:
                return [self.value(GGUFValueType.ARRAY, what, depth + 1) for _ in range(count)]
            return self.array(_FORMATS[item_type], count, what)
        return self.scalar(_FORMATS[vtype], what)


class GGUFFile:
    """A parsed GGUF file: ``metadata`` (key → Python value; numeric arrays are numpy
    arrays, string arrays are lists) and ``tensors`` (name → ``TensorInfo``), with the
    tensor bytes available through ``raw``.

    Raises ``ValueError`` (message ``"[gguf] <path>: ..."``) for a wrong magic, an
    unsupported version, truncation anywhere, unknown value or tensor types, and tensor
    data that lies outside the file.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        size = os.path.getsize(self.path)
        if size < len(_MAGIC):
            raise ValueError(f"[gguf] {self.path}: not a GGUF file: expected magic b'GGUF', "
                             f"the file has only {size} bytes")
        self._map = map_file(self.path)
        cur = _Cursor(self.path, self._map)
        magic = cur.take(4, "magic")
        if magic != _MAGIC:
            raise ValueError(f"[gguf] {self.path}: not a GGUF file: expected magic b'GGUF', "
                             f"got {magic!r}")
        self.version = cur.u32("version")
        if self.version not in _SUPPORTED_VERSIONS:
            raise ValueError(f"[gguf] {self.path}: GGUF version {self.version} is not supported "
                             f"(expected one of {_SUPPORTED_VERSIONS})")
        n_tensors = cur.u64("tensor count")
        n_kv = cur.u64("metadata count")

        self.metadata: dict[str, Any] = {}
        for i in range(n_kv):
            key = cur.string(f"metadata key #{i}")
            vtype = cur.value_type(f"metadata key '{key}'")
            self.metadata[key] = cur.value(vtype, f"metadata key '{key}'")

        infos = [self._tensor_info(cur, i) for i in range(n_tensors)]
        alignment = self.metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or isinstance(alignment, bool):
            raise ValueError(f"[gguf] {self.path}: general.alignment must be an integer, "
                             f"got {alignment!r}")
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"[gguf] {self.path}: general.alignment must be a power of two, "
                             f"got {alignment}")
        data_start = -(-cur.pos // alignment) * alignment
        self.tensors: dict[str, TensorInfo] = {}
        for name, shape, ggml_type, rel_offset, nbytes in infos:
            start = data_start + rel_offset
            if rel_offset % alignment or start + nbytes > size:
                raise ValueError(
                    f"[gguf] {self.path}: tensor '{name}' data [{start}, {start + nbytes}) must "
                    f"be {alignment}-byte aligned and inside the file ({size} bytes); the file "
                    f"is truncated or corrupt")
            self.tensors[name] = TensorInfo(name, shape, ggml_type, start, nbytes)
        buffer_windows.register(self._map, [(t.offset, t.offset + t.nbytes) for t in self.tensors.values()])

    def _tensor_info(self, cur: _Cursor, i: int):
        name = cur.string(f"tensor info #{i} name")
        what = f"tensor '{name}'"
        n_dims = cur.u32(what)
        dims = [cur.u64(what) for _ in range(n_dims)]
        raw_type = cur.u32(what)
        try:
            ggml_type = GGMLQuantizationType(raw_type)
        except ValueError:
            raise ValueError(f"[gguf] {self.path}: {what} has unknown GGML type {raw_type}") from None
        rel_offset = cur.u64(what)
        block_size, block_bytes = GGML_QUANT_SIZES[ggml_type]
        if dims and dims[0] % block_size:
            raise ValueError(f"[gguf] {self.path}: {what} of type {ggml_type.name} needs its "
                             f"first dimension to be a multiple of {block_size}, got dims {dims}")
        n_elements = math.prod(dims)  # Python ints: corrupt dims cannot overflow
        nbytes = n_elements // block_size * block_bytes
        return name, tuple(reversed(dims)), ggml_type, rel_offset, nbytes

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes: a read-only uint8 view of the file's bytes (no copy)."""
        info = self.tensors[name]
        return np.frombuffer(self._map, dtype=np.uint8, count=info.nbytes, offset=info.offset)
