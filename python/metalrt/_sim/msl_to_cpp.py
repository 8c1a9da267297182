"""Metal Shading Language source -> one C++ translation unit for the simulated device.

The ``.metal`` file is first preprocessed as Apple's compiler preprocesses it
(``msl_preprocess``: the C++ compiler's ``-E`` with Metal's predefined macros, the
Metal standard headers left to the shim), so kernels, attributes and function
constants are found with macros expanded and ``#if`` resolved. Then, each step a
module of its own, on the preprocessed text (``msl_file.SourceFile``):

1. ``msl_parse`` (reading only): the kernels and their parameters bound by
   attribute (MSL §5.2; indices are integer constant expressions, ``msl_int_expr``,
   and parameters without one get the index Metal assigns), the explicit
   instantiations ``template [[host_name("n")]] [[kernel]] ... f<...>...;``, the
   function constants and which of them each kernel requires;
2. ``msl_restrictions``: what Metal rejects and C++ accepts (``double``,
   program-scope variables outside ``constant``, ...) is an error naming the MSL
   specification section, before anything is rewritten;
3. ``msl_rewrite``: the source made C++ against the MSL shim (``metal/shim``), with
   ``#line`` directives back to the original files (errors stay at
   ``file.metal:line`` / ``header.h:line``);
4. ``msl_emit``: the translation unit, registering every non-template kernel and
   every explicit instantiation with an entry that binds each parameter.

Standard library only (plus the C++ compiler's preprocessor): it runs at build time
(CMake) and at run time (``compile_shader``). Usage:
``python msl_to_cpp.py INPUT.metal OUTPUT.cpp [--mode builtin|shared] [--depfile F]
[--reflection F.json] [--cxx CXX] [-D NAME[=VALUE]]... [-I DIR]...``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

if __package__:
    from . import msl_emit, msl_parse, msl_restrictions, msl_rewrite
    from .msl_file import SourceFile
    from .msl_preprocess import preprocess
    from .msl_restrictions import MslError
else:   # run as a script (CMake, compile_shader): its directory is on sys.path
    import msl_emit
    import msl_parse
    import msl_restrictions
    import msl_rewrite
    from msl_file import SourceFile
    from msl_preprocess import preprocess
    from msl_restrictions import MslError

__all__ = ["MslError", "describe", "function_constant_types", "generate", "main", "translate"]


def translate(source_path: str, mode: str = "builtin", defines: dict | None = None,
              include_dirs: list[str] | None = None, cxx: str | None = None
              ) -> tuple[str, dict, list[str]]:
    """Translates the MSL file ``source_path``: its one parse gives both the C++ and
    the reflection.

    Args:
        source_path: the ``.metal`` file.
        mode: "builtin" (a kernel file of the package) or "shared" (compile_shader).
        defines: preprocessor macros, name -> value or None (see msl_preprocess).
        include_dirs: directories searched for quoted includes.
        cxx: the C++ compiler whose preprocessor runs (default ``$CXX`` or ``c++``).

    Returns:
        (C++ translation unit, reflection (msl_emit.reflection), the source and every
        project header it included).

    Raises:
        MslError: at ``file:line``, for MSL the generator cannot translate or that
            Metal's compiler rejects (msl_restrictions).
    """
    pre = preprocess(source_path, defines, include_dirs, cxx)
    f = SourceFile(pre)
    program = msl_parse.parse(f)
    msl_restrictions.check(f.masked, f.where)
    body = msl_rewrite.rewrite(f, program)
    registered = msl_parse.registered(program, source_path)
    cpp = msl_emit.module(program, registered, pre, body, source_path, mode)
    return cpp, msl_emit.reflection(program, registered, f), pre.files


def generate(source_path: str, mode: str = "builtin", defines: dict | None = None,
             include_dirs: list[str] | None = None, cxx: str | None = None
             ) -> tuple[str, list[str]]:
    """(C++ translation unit, files it read) of ``source_path`` (see translate)."""
    cpp, _, files = translate(source_path, mode, defines, include_dirs, cxx)
    return cpp, files


def describe(source: str) -> dict:
    """The reflection (msl_emit.reflection) of MSL source text (no include paths), for
    a device that compiles the source itself (Apple's Metal). Raises MslError for
    source the generator rejects."""
    with tempfile.TemporaryDirectory(prefix="metalrt-msl-") as d:
        path = os.path.join(d, "shader.metal")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(source)
        return translate(path, "shared")[1]


def function_constant_types(source: str) -> dict[int, str]:
    """``{index: declared MSL type}`` of the ``constant T name [[function_constant(i)]];``
    declarations of MSL source text (see describe)."""
    return {int(i): t for i, t in describe(source)["function_constants"].items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("output")
    parser.add_argument("--mode", choices=("builtin", "shared"), default="builtin")
    parser.add_argument("--depfile")
    parser.add_argument("--reflection", help="also write the reflection (msl_emit.reflection) "
                        "as JSON to this file")
    parser.add_argument("--cxx", help="C++ compiler whose preprocessor runs (default $CXX or c++)")
    parser.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=VALUE]")
    parser.add_argument("-I", dest="include_dirs", action="append", default=[], metavar="DIR")
    args = parser.parse_args(argv)
    defines = dict((d.split("=", 1) + [None])[:2] for d in args.defines)
    try:
        text, reflection, files = translate(args.source, args.mode, defines, args.include_dirs,
                                            args.cxx)
    except MslError as e:
        print(e, file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{args.source}:1: error: {e}", file=sys.stderr)
        return 1
    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, args.output)
    if args.reflection:
        with open(args.reflection, "w", encoding="utf-8") as fh:
            json.dump(reflection, fh)
    if args.depfile:
        with open(args.depfile, "w", encoding="utf-8") as fh:
            deps = " ".join(p.replace(" ", "\\ ") for p in files)
            fh.write(f"{args.output}: {deps}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
