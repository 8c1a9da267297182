"""Rewrites of MSL syntax that Apple's (clang-based) compiler accepts and the C++
compiler of the simulated device (g++) does not, each into the C++ that means the
same. They run on the preprocessed source (msl_file.SourceFile: ``text``, ``masked``,
``replace``, ``blank``, ``error``), before the other rewrites.

* ``const constant T x`` / ``constant const T x``: the ``constant`` address space
  (MSL §4.2) becomes C++ ``const`` in the shim, and a repeated ``const`` is an error
  in C++ (clang only warns). The address space is kept as the one ``const``.
* GNU array range designators, ``T a[N] = { [lo ... hi] = v };`` (a clang and GCC C
  extension, not C++; llama.cpp's ggml writes them): the array is value-initialized
  and elements lo..hi are assigned v, which is what the initializer means.
* ``#pragma unroll`` / ``nounroll`` / ``clang loop``: loop-unrolling hints with no
  meaning for the result, dropped. Their arguments may name macros that are gone
  after preprocessing (``#pragma unroll(MIN(NSG, 4))``), which clang rejects.
"""
from __future__ import annotations

import re

_CONST_CONSTANT = re.compile(r"(?<![\w.])(?:const\s+(constant)|(constant)\s+const)(?![\w])")
# `name[dims] = { [lo ... hi] = value }` as the whole initializer of one array.
_RANGE_INIT = re.compile(
    r"(?<![\w.])(\w+)\s*\[[^\[\]]*\]\s*=\s*\{\s*\[([^\[\]{};]*?)\.\.\.([^\[\]{};]*?)\]\s*=\s*"
    r"([^{};]*?)\s*\}")
_UNROLL_PRAGMA = re.compile(r"\s*#\s*pragma\s+(?:unroll|nounroll|clang\s+loop)\b")


def merge_const_constant(f) -> None:
    """Blanks ``constant`` where ``const`` is next to it."""
    for m in _CONST_CONSTANT.finditer(f.masked):
        group = 1 if m.group(1) else 2
        f.blank(m.start(group), m.end(group))


def rewrite_range_designators(f) -> None:
    """``T a[N] = { [lo ... hi] = v };`` -> ``T a[N] = {}; for (...) a[i] = v;`` on the
    same line; any other use of ``...`` in a designator is an error naming it."""
    for m in _RANGE_INIT.finditer(f.masked):
        name, lo, hi, value = (f.text[m.start(g):m.end(g)] for g in (1, 2, 3, 4))
        start = f.masked.index("=", m.end(1))
        index = "metal_range_i_"
        f.replace(start, m.end(), f"= {{}}; for (int {index} = {lo.strip()}; {index} <= "
                                  f"{hi.strip()}; ++{index}) {name}[{index}] = {value.strip()}")
    for m in re.finditer(r"[{,]\s*\[[^\[\]{};]*?\.\.\.", f.masked):
        if not any(s <= m.start() < e for s, e, _ in f.edits):
            raise f.error(m.start(), "a GNU range designator '[lo ... hi] = v' is supported "
                                     "only as the whole initializer of an array")


def drop_unroll_pragmas(f) -> None:
    """Blanks every loop-unrolling pragma line."""
    start = 0
    for line in f.text.split("\n"):
        if _UNROLL_PRAGMA.match(line):
            f.blank(start, start + len(line))
        start += len(line) + 1
