"""The rewrites that make parsed MSL (``msl_parse.Program``) compile as C++ against
the shim (``metal/shim``), recorded on the ``SourceFile`` and returned as one text
with ``#line`` directives back to the original files:

* what clang accepts and g++ does not (``msl_syntax``);
* ``threadgroup T x[N];`` in a function body becomes per-threadgroup storage from
  the runtime (``metalrt::sim::threadgroup_variable``), and every later ``x[i]`` in
  its block a bounds-checked subscript (``metalrt::sim::threadgroup_index``);
* a function-constant declaration becomes a per-pipeline value the runtime writes
  before a dispatch, ``is_function_constant_defined(name)`` whether it was given;
* a declaration starting with ``constant`` gets C++ ``const``;
* the ``kernel`` keyword and the MSL ``[[attribute]]`` spellings are blanked
  (columns preserved)."""
from __future__ import annotations

import re

if __package__:
    from . import msl_syntax
    from .msl_file import SourceFile
    from .msl_parse import TESTED, Program
    from .msl_text import c_string, match_close, previous_char, split_top
else:   # imported by msl_to_cpp.py run as a script
    import msl_syntax
    from msl_file import SourceFile
    from msl_parse import TESTED, Program
    from msl_text import c_string, match_close, previous_char, split_top

# C++ attributes left in place; every other [[...]] is MSL and is blanked.
_CXX_ATTRIBUTES = {"maybe_unused", "nodiscard", "likely", "unlikely", "fallthrough",
                   "noreturn", "deprecated", "carries_dependency", "no_unique_address"}


def rewrite(f: SourceFile, program: Program) -> str:
    """The C++ text of ``f``, one line per preprocessed line placed at its original
    line (see _with_line_directives)."""
    msl_syntax.merge_const_constant(f)
    msl_syntax.rewrite_range_designators(f)
    msl_syntax.drop_unroll_pragmas(f)
    _rewrite_threadgroup_declarations(f)
    _rewrite_function_constants(f, program)
    _rewrite_program_constants(f)
    for span in [k.keyword for k in program.kernels.values()] + \
            [i.keyword for i in program.instantiations]:
        if span:
            f.blank(*span)
    _blank_msl_attributes(f)
    return _with_line_directives(f.result().split("\n"), f.pre)


def _rewrite_threadgroup_declarations(f: SourceFile) -> None:
    """``threadgroup float x[2][32];`` in a body -> runtime-provided storage."""
    slots = 0
    for m in re.finditer(r"(?<![\w.])threadgroup\s+(?=[A-Za-z_])", f.masked):
        if previous_char(f.masked, m.start()) not in ";{}":
            continue   # a parameter, cast or pointer type, not a declaration
        if f.masked.count("{", 0, m.start()) <= f.masked.count("}", 0, m.start()):
            continue   # namespace scope
        end = f.masked.find(";", m.end())
        decl = f.masked[m.end():end]
        outside_dims = re.sub(r"\[[^\]]*\]", "", decl)
        if re.search(r"[*&]", outside_dims):
            continue   # `threadgroup T* p = ...;` is a pointer variable, not storage
        if re.search(r"[=({]", outside_dims):
            raise f.error(m.start(), "a threadgroup variable cannot have an initializer")
        declarators = split_top(decl)
        first = re.fullmatch(r"\s*(.*?)\b(\w+)\s*((?:\[[^\]]*\]\s*)*)", declarators[0], re.S)
        if not first or not first.group(1).strip():
            raise f.error(m.start(), f"cannot read threadgroup declaration '{decl.strip()}'")
        type_text = " ".join(first.group(1).split())
        pieces = []
        for i, d in enumerate(declarators):
            dm = first if i == 0 else re.fullmatch(r"\s*(\w+)\s*((?:\[[^\]]*\]\s*)*)", d, re.S)
            if not dm:
                raise f.error(m.start(), f"cannot read threadgroup declarator '{d.strip()}'")
            name, dims = (dm.group(2), dm.group(3)) if i == 0 else (dm.group(1), dm.group(2))
            dims = "".join(dims.split())
            what = c_string(f"'{name}' ({f.where(m.start())})")
            pieces.append(f"auto& {name} = ::metalrt::sim::threadgroup_variable<"
                          f'{type_text}{dims}>({slots}u, "{what}");')
            slots += 1
            if dims:
                _check_subscripts(f, name, dims.count("["), end + 1, f.where(m.start()))
        f.replace(m.start(), end + 1, " ".join(pieces))


def _check_subscripts(f: SourceFile, name: str, rank: int, start: int, where: str) -> None:
    """Wraps every subscript of the threadgroup array ``name`` from ``start`` to the
    end of its block in ``metalrt::sim::threadgroup_index``, which makes an index out
    of the declared bounds a kernel error instead of a silent overrun of another
    variable's threadgroup memory. The array keeps its type, so it still decays to a
    pointer (accesses through pointers stay unchecked)."""
    end, depth = start, 0
    while end < len(f.masked) and depth >= 0:
        depth += {"{": 1, "}": -1}.get(f.masked[end], 0)
        end += 1
    use = re.compile(r"(?<![\w.])(?<!->)(?<!::)" + re.escape(name) + r"\s*\[")
    for m in use.finditer(f.masked, start, end):
        open_bracket = m.end() - 1
        for dim in range(rank):
            close = match_close(f.masked, open_bracket, "[", "]")
            if close < 0:
                raise f.error(open_bracket, f"unbalanced subscript of threadgroup array '{name}'")
            f.replace(open_bracket + 1, open_bracket + 1,
                      f"::metalrt::sim::threadgroup_index<decltype({name}), {dim}>(")
            f.replace(close, close, f', "{name}", "{c_string(where)}")')
            following = re.match(r"\s*\[", f.masked[close + 1:end])
            if not following:
                break
            open_bracket = close + following.end()


def _rewrite_function_constants(f: SourceFile, program: Program) -> None:
    for fc in program.constants.values():
        f.replace(*fc.declaration,
                  f" {fc.type} metalrt_fc_value_{fc.slot}{{}}; bool metalrt_fc_defined_{fc.slot} = false; "
                  f"const {fc.type}& {fc.name} = metalrt_fc_value_{fc.slot};")
    for m in TESTED.finditer(f.masked):
        fc = program.constants.get(m.group(1))
        if fc is None:
            raise f.error(m.start(), f"'{m.group(1)}' is not a function constant")
        f.replace(m.start(), m.end(), f"(metalrt_fc_defined_{fc.slot})")


def _rewrite_program_constants(f: SourceFile) -> None:
    """A declaration starting with ``constant`` (program-scope constants, and
    ``constant T* p = ...`` locals) gets C++ ``const``: MSL program-scope constants
    are compile-time constants (``constant uint TILE = 16;`` sizes arrays), while
    the shim's ``constant`` qualifier expands to nothing."""
    taken = [(s, e) for s, e, _ in f.edits]
    for m in re.finditer(r"(?<![\w.])constant(?=\s+[A-Za-z_])", f.masked):
        if previous_char(f.masked, m.start()) not in ";{}\0":
            continue   # a parameter or a cast
        if any(s <= m.start() < e for s, e in taken):
            continue   # a function constant, rewritten already
        f.replace(m.start(), m.end(), "const   ")


def _blank_msl_attributes(f: SourceFile) -> None:
    taken = {(s, e) for s, e, _ in f.edits}
    for start, end, items in f.attributes():
        if any(s <= start < e for s, e in taken):
            continue
        if items and all(key in _CXX_ATTRIBUTES for key, _ in items):
            continue
        f.blank(start, end)


def _with_line_directives(lines: list[str], pre) -> str:
    """``lines`` (one per preprocessed line) placed at their original lines: a short gap
    within a file is filled with empty lines, anything else gets a ``#line``; entering
    a header starts it at ``#line 1``. The caller has put the main file at line 1."""
    out: list[str] = []
    main = pre.locations[0][0] if pre.locations else ""
    cur_file, cur_line = main, 0
    for text, (path, line), entered in zip(lines, pre.locations, pre.entered):
        continues = path == cur_file and cur_line < line <= cur_line + 8
        if not entered and not continues and not text.strip():
            continue   # back from a header: the #line goes on the next line with code
        if entered and line <= 8:
            out.append(f'#line 1 "{c_string(path)}"')
            out.extend([""] * (line - 1))
        elif continues and not entered:
            out.extend([""] * (line - cur_line - 1))
        else:
            out.append(f'#line {line} "{c_string(path)}"')
        out.append(text)
        cur_file, cur_line = path, line
    return "\n".join(out)
