"""The C preprocessor pass of the MSL -> C++ generator: a ``.metal`` file and its
project headers, with macros expanded and ``#if`` resolved, as Apple's compiler sees
them before it parses a declaration.

It runs the C++ compiler's own preprocessor (``$CXX -E``, the compiler that builds
the generated code) with no predefined system macros (``-undef``) and no system
include paths (``-nostdinc``), defining what Metal's compiler defines for the
language version we target (``__METAL_VERSION__``, ``__METAL_MACOS__``) plus the
caller's macros (Metal's ``MTLCompileOptions.preprocessorMacros``, ``-D``).

The Metal standard headers (``<metal_stdlib>``, ``<metal_atomic>``, ...) are not
expanded: each resolves to an empty stand-in, so its declarations come later from
the shim (``metal/shim``), which the generated C++ includes. Any other ``<...>``
header does not exist for Metal code (MSL §1.5.4: the C++ standard library is not
available) and is an error naming the header. Quoted includes resolve as Metal
resolves them: the including file's directory, then ``include_dirs``.

The result keeps the preprocessor's line markers as a per-line (file, line) table,
so every diagnostic still points at ``file.metal:line`` or ``header.h:line``.
"""
from __future__ import annotations

import atexit
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

if __package__:
    from .msl_restrictions import SECTION_STDLIB, MslError
else:   # imported by msl_to_cpp.py run as a script
    from msl_restrictions import SECTION_STDLIB, MslError

# MSL 3.1, chapter 6 ("Metal Standard Library") and §6.15-6.16 (SIMD-group matrix),
# with <simd/simd.h>, the header host and MSL code share.
METAL_STANDARD_HEADERS = (
    "metal_stdlib", "metal_atomic", "metal_common", "metal_compute", "metal_geometric",
    "metal_graphics", "metal_integer", "metal_math", "metal_matrix", "metal_pack",
    "metal_quadgroup", "metal_relational", "metal_simdgroup", "metal_simdgroup_matrix",
    "metal_texture", "metal_types", "metal_uniform", "metal_logging", "metal_raytracing",
    "simd/simd.h")
# What Metal's compiler defines for MSL 3.1 on macOS (MSL §1.6, compiler options).
METAL_PREDEFINED = {"__METAL_VERSION__": "310", "__METAL_MACOS__": "1"}

_MARKER = re.compile(r'# (\d+) "((?:[^"\\]|\\.)*)"((?: \d+)*)$')
_DIAGNOSTIC = re.compile(r"^(.*?):(\d+):(?:\d+:)? (?:fatal )?error: (.*)$", re.M)
_MISSING = re.compile(r"^'?([^':]+?)'?(?:: No such file or directory| file not found)")
_stub_dir: str | None = None


@dataclass
class Preprocessed:
    """Preprocessed source: ``lines[i]`` came from ``locations[i]`` = (file, line);
    ``entered[i]`` is True where the preprocessor entered a new file before that line."""
    lines: list[str] = field(default_factory=list)
    locations: list[tuple[str, int]] = field(default_factory=list)
    entered: list[bool] = field(default_factory=list)
    system_includes: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)   # the source and its project headers


def _stubs() -> str:
    """A directory of empty stand-ins for the Metal standard headers (one per process)."""
    global _stub_dir
    if _stub_dir is None:
        _stub_dir = tempfile.mkdtemp(prefix="metalrt-msl-headers-")
        atexit.register(shutil.rmtree, _stub_dir, True)
        for name in METAL_STANDARD_HEADERS:
            path = os.path.join(_stub_dir, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").close()
    return _stub_dir


def compiler(cxx: str | None = None) -> list[str]:
    """The command words of the C++ compiler whose preprocessor runs: ``cxx`` (a path,
    CMake's compiler), else ``$CXX``, else ``c++``. ``$CXX`` is a command line (e.g.
    ``ccache g++``), as cpp/sim/kernel_compiler.cpp runs it."""
    return [cxx] if cxx else shlex.split(os.environ.get("CXX") or "c++")


def _command(path: str, defines: dict, include_dirs: list[str], cxx: str | None) -> list[str]:
    cmd = [*compiler(cxx), "-E", "-x", "c++", "-std=c++17", "-undef", "-nostdinc",
           "-isystem", _stubs()]
    for name, value in {**METAL_PREDEFINED, **defines}.items():
        cmd.append(f"-D{name}" if value is None else f"-D{name}={value}")
    for d in include_dirs:
        cmd += ["-I", d]
    return cmd + [path]


def _diagnostic(stderr: str) -> MslError:
    """The preprocessor's first error as an MslError at file:line; a missing header
    is named as Metal would see it (a Metal or project header, or neither)."""
    m = _DIAGNOSTIC.search(stderr)
    if not m:
        return MslError(stderr.strip() or "the C preprocessor failed")
    where, message = f"{m.group(1)}:{m.group(2)}", m.group(3).strip()
    missing = _MISSING.match(message)
    if not missing:
        return MslError(f"{where}: error: {message}")
    # A compiler that adds include directories of its own (a wrapper passing -isystem
    # for libstdc++, which -nostdinc keeps) finds <vector> and fails deeper inside it:
    # the error Metal gives is at the outermost #include <...> of a non-Metal header.
    for file, line in _include_chain(stderr[:m.start()]) + [(m.group(1), int(m.group(2)))]:
        name = _angled_include(file, line)
        if name and name not in METAL_STANDARD_HEADERS:
            return _not_metal(file, line, name)
    return MslError(f"{where}: error: cannot find included file '{missing.group(1)}'")


def _foreign_system_header(includer: tuple[str, int], header: str) -> MslError:
    """A system header that the compiler's own include directories supplied in full (a
    wrapper's -isystem, which -nostdinc keeps): Metal has no such header. The error is
    at the #include line that entered it, naming the header as written there."""
    file, line = includer
    return _not_metal(file, line, _angled_include(file, line) or os.path.basename(header))


def _not_metal(file: str, line: int, name: str) -> MslError:
    return MslError(f"{file}:{line}: error: #include <{name}> is not a Metal standard header "
                    f"({SECTION_STDLIB}: the C++ standard library is not available in Metal; "
                    "use the Metal standard library)")


def _include_chain(stderr: str) -> list[tuple[str, int]]:
    """The (file, line) of each #include that led to the error, outermost first: GCC
    prints "In file included from inner," then "from outer" lines, Clang one "In file
    included from" line per level, outermost first."""
    chain = [(f, int(n)) for f, n in re.findall(r"^(?:In file included from|\s+from) (.*?):(\d+)[,:]",
                                                 stderr, re.M)]
    gcc_style = re.search(r"^\s+from ", stderr, re.M) is not None
    return chain[::-1] if gcc_style else chain


def _angled_include(path: str, number: int) -> str | None:
    """X of an ``#include <X>`` at line ``number`` of ``path``, else None (another
    line, a quoted or macro include, an unreadable file)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read().split("\n")[number - 1]
    except (OSError, IndexError, UnicodeDecodeError):
        return None
    angled = re.match(r"\s*#\s*include\s*<([^>]+)>", text)
    return angled.group(1) if angled else None


def preprocess(path: str, defines: dict | None = None, include_dirs: list[str] | None = None,
               cxx: str | None = None) -> Preprocessed:
    """Runs the preprocessor over the MSL file ``path``.

    Args:
        path: the ``.metal`` file.
        defines: macro name -> value (str/int) or None (defined as 1), as ``-D``.
        include_dirs: directories for quoted includes after the file's own directory.
        cxx: the compiler (default :func:`compiler`).

    Raises:
        MslError: at ``file:line``: an ``#error``, a missing project header, a
            ``<header>`` that is not a Metal standard header, or any other
            preprocessor error; or the compiler cannot be run.
    """
    cmd = _command(path, defines or {}, include_dirs or [], cxx)
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise MslError(f"{path}:1: error: cannot run the C preprocessor '{cmd[0]}': {e}") from e
    if run.returncode != 0:
        raise _diagnostic(run.stderr)
    stubs = _stubs() + os.sep
    out = Preprocessed()
    seen: set[str] = set()
    file, line, entered = path, 1, None   # entered: the file a "1" marker started
    for text in run.stdout.split("\n"):
        marker = _MARKER.match(text)
        if marker:
            includer = (file, line)
            line = int(marker.group(1))
            file = marker.group(2).replace('\\"', '"').replace("\\\\", "\\")
            flags = marker.group(3).split()
            if "1" in flags and "3" in flags and not file.startswith(stubs) and not file.startswith("<"):
                raise _foreign_system_header(includer, file)
            if file.startswith(stubs):
                name = file[len(stubs):]
                if "1" in flags and name not in out.system_includes:
                    out.system_includes.append(name)
            elif not file.startswith("<"):
                if "1" in flags:
                    entered = file
                if file not in seen:
                    seen.add(file)
                    out.files.append(os.path.realpath(file))
            continue
        if not file.startswith(stubs) and not file.startswith("<"):
            out.lines.append(text)
            out.locations.append((file, line))
            out.entered.append(entered == file)
            entered = None
        line += 1
    while out.lines and not out.lines[-1].strip():   # the output's trailing newline
        out.lines.pop()
        out.locations.pop()
        out.entered.pop()
    return out
