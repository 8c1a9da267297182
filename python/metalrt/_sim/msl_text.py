"""Text helpers of the MSL generator: masking comments, literals and directives out
of the way (positions and newlines kept), bracket matching, statement starts,
splitting at top-level commas, reading attribute lists, and C string escapes."""
from __future__ import annotations

import re


def mask(text: str, keep_literals: bool = False) -> str:
    """Same length as ``text``; comments, string/char literal bodies (unless
    ``keep_literals``) and preprocessor lines (``#pragma``, line markers) replaced
    by spaces, newlines kept."""
    out = list(text)
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if line_start and c == "#":
            j = i
            while j < n and not (text[j] == "\n" and text[j - 1] != "\\"):
                j += 1
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out[i:j] = " " * (j - i)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            if not keep_literals:
                for k in range(i + 1, min(j, n)):
                    out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


def match_close(masked: str, start: int, open_c: str, close_c: str) -> int:
    """Index of the bracket closing the one at ``start``."""
    depth = 0
    for i in range(start, len(masked)):
        if masked[i] == open_c:
            depth += 1
        elif masked[i] == close_c:
            depth -= 1
            if depth == 0:
                return i
    return -1


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside (), [], {} and <>."""
    parts, depth, cur = [], 0, []
    for c in text:
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        if c == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts


def attribute_items(body: str) -> list[tuple[str, str]]:
    """``buffer(0), function_constant(x)`` -> [("buffer", "0"), ("function_constant", "x")]."""
    items = []
    for part in split_top(body):
        m = re.fullmatch(r"\s*([A-Za-z_][\w:]*)\s*(?:\((.*)\))?\s*", part, re.S)
        if m:
            items.append((m.group(1), (m.group(2) or "").strip()))
    return items


def blank_attributes(masked: str) -> str:
    """``masked`` with every ``[[...]]`` replaced by spaces (newlines kept)."""
    return re.sub(r"\[\[.*?\]\]", lambda m: re.sub(r"[^\n]", " ", m.group()), masked, flags=re.S)


def statement_start(masked: str, pos: int) -> int:
    """Start of the statement containing ``pos`` (after the previous ; { or })."""
    i = pos - 1
    depth = 0
    while i >= 0:
        c = masked[i]
        if c in ")]":
            depth += 1
        elif c in "([":
            if depth == 0:
                return i + 1
            depth -= 1
        elif c in ";{}" and depth == 0:
            return i + 1
        i -= 1
    return 0


def previous_char(masked: str, pos: int) -> str:
    """The last non-space character before ``pos``, or "\\0" at the start of the text.
    No slicing: a preprocessed source with all its headers is large, and this runs
    once per keyword."""
    i = pos - 1
    while i >= 0 and masked[i].isspace():
        i -= 1
    return masked[i] if i >= 0 else "\0"


def c_string(s: str) -> str:
    """``s`` escaped for a C string literal."""
    return s.replace("\\", "\\\\").replace('"', '\\"')
