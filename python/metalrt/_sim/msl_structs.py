"""Byte sizes of the plain structs an MSL source declares (part of the generator's
reflection, ``msl_emit.reflection``), so that compile_shader can refuse a ``bytes`` argument shorter than its ``constant Struct&`` parameter (the kernel
would read past what setBytes copied).

Laid out as MSL 3.1 §2.1-2.3 and Table 2.2 say: a scalar or vector is aligned to its
size (a 3-component vector takes 4 components' room), a packed vector to its scalar,
an ``NxM`` matrix is N column vectors of M components, an array repeats its element,
and a struct is aligned to its most aligned member and padded to a multiple of that.
A struct is sized only when every member is one of these or an earlier sized struct;
anything else (templates, ``alignas``, atomics, pointers, member functions) leaves it
unknown, and its arguments unchecked.
"""
from __future__ import annotations

import re

# MSL scalar types and their byte sizes (MSL 3.1 §2.1, Table 2.1).
SCALAR_SIZES = {"bool": 1, "char": 1, "int8_t": 1, "uchar": 1, "uint8_t": 1, "short": 2,
                "int16_t": 2, "ushort": 2, "uint16_t": 2, "half": 2, "bfloat": 2, "int": 4,
                "int32_t": 4, "uint": 4, "uint32_t": 4, "float": 4, "long": 8, "int64_t": 8,
                "ulong": 8, "uint64_t": 8, "size_t": 8, "ptrdiff_t": 8}

_OPEN = re.compile(r"\b(typedef\s+)?struct\b\s*(\w+)?\s*\{")
_MEMBER = re.compile(r"(?:const\s+)?(\w+)\s+(\w+(?:\s*\[\s*\d+\s*\])?(?:\s*,\s*\w+(?:\s*\[\s*\d+\s*\])?)*)")
_TYPE = re.compile(r"(packed_)?([a-z_]+?(?:8_t|16_t|32_t|64_t)?)([234])?(?:x([234]))?")


def _type_layout(name: str, structs: dict[str, tuple[int, int]]):
    """(size, alignment) of a member type, None when it cannot be laid out here."""
    if name in structs:
        return structs[name]
    m = _TYPE.fullmatch(name)
    if not m or m.group(2) not in SCALAR_SIZES:
        return None
    packed, scalar, n, rows = m.group(1), SCALAR_SIZES[m.group(2)], m.group(3), m.group(4)
    if n is None:
        return None if packed or rows else (scalar, scalar)
    n = int(n)
    if packed:
        return None if rows else (scalar * n, scalar)
    if rows is not None:   # floatNxM: N columns, each a vector of M components
        column = scalar * (4 if rows == "3" else int(rows))
        return column * n, column
    size = scalar * (4 if n == 3 else n)
    return size, size


def _layout(body: str, structs: dict[str, tuple[int, int]]):
    """(size, alignment) of a struct body, None when a member cannot be laid out."""
    if "{" in body or "(" in body or "[[" in body:
        return None
    offset, align = 0, 1
    for decl in filter(None, (d.strip() for d in body.split(";"))):
        m = _MEMBER.fullmatch(decl)
        layout = m and _type_layout(m.group(1), structs)
        if not layout:
            return None
        size, member_align = layout
        for declarator in m.group(2).split(","):
            count = re.search(r"\[\s*(\d+)\s*\]", declarator)
            offset = -(-offset // member_align) * member_align + size * (int(count.group(1)) if count else 1)
        align = max(align, member_align)
    if offset == 0:
        return None
    return -(-offset // align) * align, align


def struct_sizes(source: str) -> dict[str, int]:
    """``{struct name: sizeof}`` of the file-scope ``struct Name {...};`` and
    ``typedef struct {...} Name;`` declarations of MSL ``source`` (its quoted includes
    inlined; comments are skipped) that can be laid out (see the module docstring)."""
    source = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    structs: dict[str, tuple[int, int]] = {}
    for m in _OPEN.finditer(source):
        end = source.find("}", m.end())
        if end < 0:
            break
        name = m.group(2)
        if m.group(1):   # typedef struct [tag] { ... } Name;
            alias = re.match(r"\s*(\w+)\s*;", source[end + 1:])
            name = alias.group(1) if alias else None
        layout = _layout(source[m.end():end], structs)
        if name and layout:
            structs[name] = layout
    return {name: size for name, (size, _) in structs.items()}
