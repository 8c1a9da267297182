"""compile_shader's compile options as one self-contained MSL source: the macros
(Metal's ``MTLCompileOptions.preprocessorMacros``) as ``#define`` lines ahead of the
source, and the quoted includes the caller provides (``headers``) copied in place
with ``#line`` directives, so the text compiles the same on Apple's runtime compiler
and the simulated device, and diagnostics keep ``shader.metal:line`` / ``name.h:line``.
The preprocessor still decides everything else (``#if``, include guards, macros).
"""
from __future__ import annotations

import math
import os
import re

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[^\n]*$', re.M)
_PRAGMA_ONCE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once\b", re.M)
# The classic include guard: `#ifndef G` then `#define G` before anything but
# whitespace and comments. Re-entering such a header from inside itself (a.h includes
# b.h, which includes a.h) is empty, as the preprocessor finds G defined.
_GUARD = re.compile(r"\A(?:\s|//[^\n]*\n|/\*.*?\*/)*#[ \t]*ifndef[ \t]+(\w+)[ \t]*(?://[^\n]*)?\n"
                    r"(?:\s|//[^\n]*\n|/\*.*?\*/)*#[ \t]*define[ \t]+\1\b", re.S)
_MAX_DEPTH = 32


def _define_lines(defines) -> list[str]:
    if defines is None:
        return []
    if not isinstance(defines, dict):
        raise TypeError(f"[compile_shader] defines must be a dict {{name: value}}, got "
                        f"{type(defines).__name__}")
    lines = []
    for name, value in defines.items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise ValueError(f"[compile_shader] a macro name must be an identifier, got {name!r}")
        if value is None:
            lines.append(f"#define {name} 1")   # as -DNAME and preprocessorMacros' @1
        elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise TypeError(f"[compile_shader] macro {name} must be a str, int, float or None, "
                            f"got {type(value).__name__}")
        elif "\n" in str(value) or "\r" in str(value) or str(value).rstrip().endswith("\\"):
            # A lone CR ends a line for the preprocessor too, and a final backslash
            # continues the #define over the line after it (the #line below).
            raise ValueError(f"[compile_shader] macro {name} must be one line, got {value!r}")
        elif isinstance(value, float) and not math.isfinite(value):
            # str() gives "nan"/"inf": names, not numbers, in MSL
            raise ValueError(f"[compile_shader] macro {name} must be a finite number, got {value!r}")
        else:
            lines.append(f"#define {name} {value}")
    return lines


def _header_reader(headers):
    """name -> text or None, from a dict of texts or a directory."""
    if headers is None:
        return lambda name: None
    if isinstance(headers, dict):
        for name, text in headers.items():
            if not isinstance(name, str) or not isinstance(text, str):
                raise TypeError("[compile_shader] headers must map header names (str) to their "
                                f"text (str), got {type(name).__name__} -> {type(text).__name__}")
        return headers.get
    if isinstance(headers, (str, os.PathLike)):
        root = os.fspath(headers)
        if not os.path.isdir(root):
            raise ValueError(f"[compile_shader] headers directory {root!r} does not exist")

        def read(name: str):
            path = os.path.join(root, name)
            if not os.path.isfile(path):
                return None
            with open(path, encoding="utf-8") as fh:
                return fh.read()
        return read
    raise TypeError("[compile_shader] headers must be a dict {name: text} or a directory path, "
                    f"got {type(headers).__name__}")


def build_source(source: str, defines=None, headers=None) -> str:
    """``source`` with ``defines`` (name -> value, None for 1) and the quoted includes
    found in ``headers`` (dict name -> text, or a directory) made part of the text.
    An include not found there is left for the compiler (which reports it).

    Raises:
        TypeError: defines/headers of the wrong type.
        ValueError: a macro name that is not an identifier, a multi-line value, a
            missing headers directory, or headers that include each other without end.
    """
    read = _header_reader(headers)
    once: set[str] = set()

    def inline(text: str, file: str, depth: int, stack: tuple = ()) -> str:
        def include(m: re.Match) -> str:
            name = m.group(1)
            body = read(name)
            if body is None:
                return m.group(0)
            if name in stack and _GUARD.match(body):
                return ""   # its guard is defined by now: the preprocessor would skip it
            if depth >= _MAX_DEPTH:
                raise ValueError(f"[compile_shader] headers include each other more than "
                                 f"{_MAX_DEPTH} deep (at {name!r})")
            if name in once:
                return ""
            if _PRAGMA_ONCE.search(body):
                once.add(name)
            line = text.count("\n", 0, m.start()) + 1
            return (f'#line 1 "{name}"\n{inline(body, name, depth + 1, stack + (name,))}\n'
                    f'#line {line + 1} "{file}"')
        return _INCLUDE.sub(include, text)

    body = inline(source, "shader.metal", 0) if headers is not None else source
    lines = _define_lines(defines)
    if not lines:
        return body
    return "\n".join(lines) + f'\n#line 1 "shader.metal"\n' + body
