"""Metal Shading Language source -> one C++ translation unit for the simulated device.

The ``.metal`` file is first preprocessed as Apple's compiler preprocesses it
(``msl_preprocess``: the C++ compiler's ``-E`` with Metal's predefined macros, the
Metal standard headers left to the shim), so kernels, attributes and function
constants are found with macros expanded and ``#if`` resolved. The output includes
the MSL shim (``metal/shim``), then the preprocessed text with ``#line`` directives
back to the original files (errors stay at ``file.metal:line`` / ``header.h:line``),
rewritten only where MSL is not C++:

* ``[[attribute]]`` spellings of MSL are blanked (columns preserved);
* a declaration starting with ``constant`` gets C++ ``const`` (program-scope
  constants are compile-time constants);
* ``threadgroup T x[N];`` in a function body becomes per-threadgroup storage
  obtained from the runtime (``metalrt::sim::threadgroup_variable``), and every
  later ``x[i]`` in its block a bounds-checked subscript
  (``metalrt::sim::threadgroup_index``);
* ``constant T name [[function_constant(i)]];`` becomes a per-pipeline value the
  runtime writes before a dispatch, and ``is_function_constant_defined(name)`` reads
  whether the pipeline defined it; each kernel lists the constants it requires
  (uses without testing them), which a pipeline must give values for.
* what clang accepts and g++ does not (``const constant``, GNU range designators,
  ``#pragma unroll``) becomes the C++ that means the same (``msl_syntax``).

What Metal rejects and C++ accepts (``double``, program-scope variables outside
``constant``, ...) is an error naming the MSL specification section
(``msl_restrictions``). Attribute indices are integer constant expressions
(``msl_int_expr``); buffer and threadgroup parameters without one get the index
Metal assigns.

It then registers every kernel -- each non-template ``kernel void f(...)`` and each
explicit instantiation ``template [[host_name("n")]] [[kernel]] ... f<...>...;`` --
with an entry that binds every parameter by its attribute (MSL specification §5.2,
"Attributes for kernel function input arguments").

Standard library only (plus the C++ compiler's preprocessor): it runs at build time
(CMake) and at run time (``compile_shader``). Usage:
``python msl_to_cpp.py INPUT.metal OUTPUT.cpp [--mode builtin|shared] [--depfile F]
[--cxx CXX] [-D NAME[=VALUE]]... [-I DIR]...``.
"""
from __future__ import annotations

import argparse
import bisect
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field

if __package__:
    from . import msl_restrictions, msl_syntax
    from .msl_int_expr import evaluate
    from .msl_preprocess import Preprocessed, preprocess
    from .msl_restrictions import MslError
    from .msl_text import attribute_items, blank_attributes, mask, match_close, split_top
else:   # run as a script (CMake, compile_shader): its directory is on sys.path
    import msl_restrictions
    import msl_syntax
    from msl_int_expr import evaluate
    from msl_preprocess import Preprocessed, preprocess
    from msl_restrictions import MslError
    from msl_text import attribute_items, blank_attributes, mask, match_close, split_top

# Attributes of kernel parameters: name -> (ThreadContext field, components).
_POSITIONS = {
    "thread_position_in_grid": ("thread_position_in_grid", 3),
    "threadgroup_position_in_grid": ("threadgroup_position_in_grid", 3),
    "thread_position_in_threadgroup": ("thread_position_in_threadgroup", 3),
    "threads_per_threadgroup": ("threads_per_threadgroup", 3),
    "threadgroups_per_grid": ("threadgroups_per_grid", 3),
    "threads_per_grid": ("threads_per_grid", 3),
    "thread_index_in_threadgroup": ("thread_index_in_threadgroup", 0),
    "thread_index_in_simdgroup": ("thread_index_in_simdgroup", 0),
    "simdgroup_index_in_threadgroup": ("simdgroup_index_in_threadgroup", 0),
    "simdgroups_per_threadgroup": ("simdgroups_per_threadgroup", 0),
    "thread_execution_width": ("threads_per_simdgroup", 0),
    "threads_per_simdgroup": ("threads_per_simdgroup", 0),
}
# C++ attributes left in place; every other [[...]] is MSL and is blanked.
_CXX_ATTRIBUTES = {"maybe_unused", "nodiscard", "likely", "unlikely", "fallthrough",
                   "noreturn", "deprecated", "carries_dependency", "no_unique_address"}
_FC_TYPES = {"bool": 1, "char": 1, "uchar": 1, "short": 2, "ushort": 2, "half": 2,
             "int": 4, "uint": 4, "float": 4, "int16_t": 2, "uint16_t": 2,
             "int32_t": 4, "uint32_t": 4}


@dataclass
class Param:
    name: str
    kind: str          # "buffer", "threadgroup" or a _POSITIONS key
    index: int | None = 0   # buffer/threadgroup index; None until Metal's implicit one is given
    components: int = 0
    type: str = ""     # the declared type, e.g. "constant uint2&"
    guard: str | None = None   # function-constant name guarding a buffer


@dataclass
class KernelDef:
    name: str
    params: list[Param]
    is_template: bool
    host_name: str | None
    location: str


@dataclass
class Instantiation:
    kernel: str
    template_args: str
    host_name: str
    location: str


@dataclass
class FunctionConstant:
    index: int
    name: str
    type: str
    slot: int


@dataclass
class State:
    kernels: dict[str, KernelDef] = field(default_factory=dict)
    instantiations: list[Instantiation] = field(default_factory=list)
    constants: dict[str, FunctionConstant] = field(default_factory=dict)
    threadgroup_slots: int = 0
    # Per function name (overloads and template specialisations merged): the
    # identifiers its body names and the function constants it tests with
    # is_function_constant_defined.
    functions: dict[str, tuple[set[str], set[str]]] = field(default_factory=dict)


class _File:
    """The preprocessed source being rewritten: its text, the masked text, edits, and
    the (file, line) each of its lines came from."""

    def __init__(self, pre: Preprocessed):
        self.pre = pre
        self.text = "\n".join(pre.lines)
        self.masked = mask(self.text)
        self.edits: list[tuple[int, int, str]] = []
        self._starts = [0]
        for line in pre.lines[:-1]:
            self._starts.append(self._starts[-1] + len(line) + 1)

    def where(self, pos: int) -> str:
        if not self.pre.locations:
            return f"{self.pre.files[0] if self.pre.files else '?'}:1"
        path, line = self.pre.locations[bisect.bisect_right(self._starts, pos) - 1]
        return f"{path}:{line}"

    def error(self, pos: int, message: str) -> MslError:
        return MslError(f"{self.where(pos)}: error: {message}")

    def replace(self, start: int, end: int, new: str) -> None:
        """Replace [start, end) keeping the number of newlines (lines stay put)."""
        lost = self.text.count("\n", start, end) - new.count("\n")
        if lost < 0:
            raise self.error(start, "a rewrite adds lines (generator bug)")
        self.edits.append((start, end, new + "\n" * lost))

    def blank(self, start: int, end: int) -> None:
        self.replace(start, end, re.sub(r"[^\n]", " ", self.text[start:end]))

    def result(self) -> str:
        out, last = [], 0
        for start, end, new in sorted(self.edits):
            if start < last:
                raise self.error(start, "overlapping rewrite (generator bug)")
            out.append(self.text[last:start])
            out.append(new)
            last = end
        out.append(self.text[last:])
        return "".join(out)


# ---- the rewrites ----

def _attributes(f: _File):
    """(start, end, items) of every [[...]] in the file."""
    for m in re.finditer(r"\[\[(.*?)\]\]", f.masked, re.S):
        body = f.text[m.start(1):m.end(1)]
        yield m.start(), m.end(), attribute_items(body)


def _statement_start(masked: str, pos: int) -> int:
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


def _parse_params(f: _File, open_paren: int, close_paren: int, kernel: str) -> list[Param]:
    params: list[Param] = []
    text = f.text[open_paren + 1:close_paren]
    masked = f.masked[open_paren + 1:close_paren]
    offset = open_paren + 1
    pos = 0
    for part in split_top(masked):
        start = offset + pos
        original = text[pos:pos + len(part)]
        pos += len(part) + 1
        if not part.strip() or part.strip() == "void":
            continue
        attrs = re.findall(r"\[\[(.*?)\]\]", original, re.S)
        decl = re.sub(r"\[\[.*?\]\]", " ", part, flags=re.S).strip()
        name_m = re.search(r"(\w+)\s*$", decl)
        if not name_m:
            raise f.error(start, f"kernel '{kernel}': cannot read parameter '{decl}'")
        name = name_m.group(1)
        type_text = decl[:name_m.start()].strip()
        items = [item for a in attrs for item in attribute_items(a)]
        param = None
        guard = None
        for key, arg in items:
            if key in ("buffer", "threadgroup"):
                param = Param(name, key, _index(f, start, f"kernel '{kernel}': [[{key}({arg})]]", arg))
            elif key in _POSITIONS:
                vector = re.search(r"([234])\s*>?\s*$", type_text)
                components = int(vector.group(1)) if vector else 1
                param = Param(name, key, components=components)
            elif key == "function_constant":
                guard = arg
            else:
                raise f.error(start, f"kernel '{kernel}': unsupported attribute [[{key}]] "
                                     f"on parameter '{name}'")
        words = re.findall(r"\w+", type_text)
        if param is None and ("device" in words or "constant" in words):
            param = Param(name, "buffer", None)        # Metal assigns the index
        elif param is None and "threadgroup" in words:
            param = Param(name, "threadgroup", None)
        if param is None:
            raise f.error(start, f"kernel '{kernel}': parameter '{name}' is neither in the device, "
                                 "constant or threadgroup address space nor has a position "
                                 "attribute")
        if param.index is not None and param.index >= 31:
            raise f.error(start, f"kernel '{kernel}': [[{param.kind}({param.index})]] is "
                                 "past Metal's 31 bindings")
        if guard is not None and param.kind != "buffer":
            raise f.error(start, f"kernel '{kernel}': function_constant on a non-buffer "
                                 f"parameter '{name}' is not supported")
        param.guard = guard
        param.type = " ".join(type_text.split())
        params.append(param)
    _assign_implicit_indices(f, open_paren, kernel, params)
    return params


def _assign_implicit_indices(f: _File, where: int, kernel: str, params: list[Param]) -> None:
    """A buffer (threadgroup) parameter without [[buffer(n)]] ([[threadgroup(n)]]) gets
    the lowest index no other parameter of its kind has taken, in declaration order
    (MSL §5.2.1: Metal assigns unassigned argument indices itself)."""
    for kind in ("buffer", "threadgroup"):
        taken = {p.index for p in params if p.kind == kind and p.index is not None}
        for p in params:
            if p.kind == kind and p.index is None:
                p.index = min(set(range(32)) - taken)
                taken.add(p.index)
                if p.index >= 31:
                    raise f.error(where, f"kernel '{kernel}': parameter '{p.name}' is past "
                                         f"Metal's 31 {kind} bindings")


def _index(f: _File, pos: int, what: str, expr: str) -> int:
    """The value of an attribute's integer constant expression (macros expanded)."""
    try:
        value = evaluate(expr)
    except ValueError as e:
        raise f.error(pos, f"{what} needs an integer constant expression: {e}") from None
    if value < 0:
        raise f.error(pos, f"{what} is negative ({value})")
    return value


def _find_kernels(f: _File, state: State) -> None:
    """Kernel definitions (``kernel void f(`` or ``[[kernel]] void f(``)."""
    pattern = re.compile(r"(\bkernel\b|\[\[\s*kernel\s*\]\])\s*void\s+(\w+)\s*\(")
    for m in pattern.finditer(f.masked):
        start = _statement_start(f.masked, m.start())
        prefix = f.masked[start:m.start()]
        name = m.group(2)
        open_paren = m.end() - 1
        close_paren = match_close(f.masked, open_paren, "(", ")")
        if close_paren < 0:
            raise f.error(m.start(), f"kernel '{name}': unbalanced parentheses")
        after = f.masked[close_paren + 1:].lstrip()
        if not after.startswith("{"):
            continue   # a declaration
        if name in state.kernels:
            raise f.error(m.start(), f"kernel '{name}' defined twice")
        host = re.search(r'host_name\s*\(\s*"([^"]*)"', f.text[start:m.start()])
        state.kernels[name] = KernelDef(
            name, _parse_params(f, open_paren, close_paren, name),
            is_template=bool(re.search(r"\btemplate\s*<", prefix)),
            host_name=host.group(1) if host else None, location=f.where(m.start()))
        if m.group(1) == "kernel":
            f.blank(m.start(1), m.end(1))


def _parse_instantiation(statement: str) -> tuple[str, str, str] | str:
    """(kernel, template arguments, host name) of ``template [[host_name("n")]]
    [[kernel]] void f<A>(...)`` or ``... decltype(f<A>) f<A>`` (comments removed,
    literals kept); an error message when it is not one."""
    host = re.search(r'host_name\s*\(\s*((?:"[^"]*"\s*)+)\)', statement)
    if not host:
        return "explicit kernel instantiation needs [[host_name(\"...\")]]"
    body = blank_attributes(statement)
    base = body.find("decltype") + len("decltype") if "decltype" in body else 0
    target = re.search(r"(\w+)\s*<", body[base:])
    if not target:
        return "cannot find the instantiated kernel in this statement"
    lt = base + target.end() - 1
    gt = match_close(body, lt, "<", ">")
    if gt < 0:
        return "unbalanced template arguments"
    name = "".join(re.findall(r'"([^"]*)"', host.group(1)))   # adjacent literals join
    return target.group(1), body[lt + 1:gt].strip(), name


def _find_instantiations(f: _File, state: State) -> None:
    """Explicit kernel instantiations written out in the file."""
    code = mask(f.text, keep_literals=True)
    for m in re.finditer(r"\btemplate\s*(?=\[\[)", f.masked):
        end = f.masked.find(";", m.end())
        if end < 0:
            raise f.error(m.start(), "explicit instantiation without ';'")
        parsed = _parse_instantiation(code[m.start():end])
        if isinstance(parsed, str):
            raise f.error(m.start(), parsed)
        state.instantiations.append(Instantiation(*parsed[:2], parsed[2], f.where(m.start())))
        statement = blank_attributes(f.masked[m.start():end])
        kernel_word = re.search(r"\bkernel\b", statement)
        if kernel_word:
            f.blank(m.start() + kernel_word.start(), m.start() + kernel_word.end())


def _previous_char(masked: str, pos: int) -> str:
    """The last non-space character before ``pos``, or "\\0" at the start of the text.
    No slicing: a preprocessed source with all its headers is large, and this runs
    once per keyword."""
    i = pos - 1
    while i >= 0 and masked[i].isspace():
        i -= 1
    return masked[i] if i >= 0 else "\0"


def _rewrite_threadgroup_declarations(f: _File, state: State) -> None:
    """``threadgroup float x[2][32];`` in a body -> runtime-provided storage."""
    for m in re.finditer(r"(?<![\w.])threadgroup\s+(?=[A-Za-z_])", f.masked):
        if _previous_char(f.masked, m.start()) not in ";{}":
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
            what = _c_string(f"'{name}' ({f.where(m.start())})")
            pieces.append(f"auto& {name} = ::metalrt::sim::threadgroup_variable<"
                          f'{type_text}{dims}>({state.threadgroup_slots}u, "{what}");')
            state.threadgroup_slots += 1
            if dims:
                _check_subscripts(f, name, dims.count("["), end + 1, f.where(m.start()))
        f.replace(m.start(), end + 1, " ".join(pieces))


def _check_subscripts(f: _File, name: str, rank: int, start: int, where: str) -> None:
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
            f.replace(close, close, f', "{name}", "{_c_string(where)}")')
            following = re.match(r"\s*\[", f.masked[close + 1:end])
            if not following:
                break
            open_bracket = close + following.end()


def _rewrite_function_constants(f: _File, state: State) -> None:
    for start, end, items in list(_attributes(f)):
        fc = [arg for key, arg in items if key == "function_constant"]
        if not fc:
            continue
        stmt = _statement_start(f.masked, start)
        head = f.masked[stmt:start]
        stmt += len(head) - len(head.lstrip())
        decl = re.fullmatch(r"\s*constant\s+([\w: ]+?)\s+(\w+)\s*", head)
        if not decl:
            continue   # a guarded kernel parameter, read by _parse_params
        semi = f.masked.find(";", end)
        if f.masked[end:semi].strip():
            raise f.error(start, "a function constant declaration takes no initializer")
        index = _index(f, start, f"[[function_constant({fc[0]})]]", fc[0])
        type_text = " ".join(decl.group(1).split())
        if type_text not in _FC_TYPES:
            raise f.error(start, f"function constant type '{type_text}' is not supported "
                                 f"(supported: {', '.join(sorted(_FC_TYPES))})")
        name = decl.group(2)
        slot = len(state.constants)
        state.constants[name] = FunctionConstant(index, name, type_text, slot)
        f.replace(stmt, semi + 1,
                  f" {type_text} metalrt_fc_value_{slot}{{}}; bool metalrt_fc_defined_{slot} = false; "
                  f"const {type_text}& {name} = metalrt_fc_value_{slot};")
    for m in re.finditer(r"\bis_function_constant_defined\s*\(\s*(\w+)\s*\)", f.masked):
        fc = state.constants.get(m.group(1))
        if fc is None:
            raise f.error(m.start(), f"'{m.group(1)}' is not a function constant")
        f.replace(m.start(), m.end(), f"(metalrt_fc_defined_{fc.slot})")


# Words followed by ``(...) {`` that do not name a function body.
_NOT_FUNCTIONS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "alignof",
                  "decltype", "static_assert"}
_TESTED = re.compile(r"\bis_function_constant_defined\s*\(\s*(\w+)\s*\)")


def _record_function_uses(f: _File, state: State) -> None:
    """What every function body of the file names (``state.functions``): a kernel
    requires the function constants its body, or a function it calls, uses without
    testing them with is_function_constant_defined. By name, not by C++ lookup:
    overloads merge, so a constant is at worst required of a kernel that does not
    use it (an error Metal would not give); that did not happen in this project."""
    for brace in re.finditer(r"\{", f.masked):
        head = re.search(r"\)\s*(?:(?:const|noexcept|override|mutable)\s*)*$",
                         f.masked[max(0, brace.start() - 200):brace.start()])
        if not head:
            continue
        close = brace.start() - len(head.group())
        depth, i = 0, close
        while i >= 0:   # the matching "(" of the parameter list
            depth += {")": 1, "(": -1}.get(f.masked[i], 0)
            if depth == 0:
                break
            i -= 1
        name = re.search(r"(\w+)\s*$", f.masked[max(0, i - 200):max(i, 0)])
        if i < 0 or not name or name.group(1) in _NOT_FUNCTIONS:
            continue   # a lambda, a control statement or not a function
        end = match_close(f.masked, brace.start(), "{", "}")
        body = f.masked[brace.start():end if end >= 0 else len(f.masked)]
        names, tested = state.functions.setdefault(name.group(1), (set(), set()))
        tested.update(_TESTED.findall(body))
        names.update(re.findall(r"\b[A-Za-z_]\w*", _TESTED.sub(" ", body)))


def _required_constants(kernel: str, state: State) -> list[int]:
    """Indices of the function constants ``kernel`` requires: those its body or a
    function it reaches uses, except the ones tested with is_function_constant_defined
    (Apple, MTLFunctionConstant.required: "A function constant is optional only if it
    is referenced in a call to the built-in is_function_constant_defined(name)
    function.")."""
    seen, todo, used, tested = set(), [kernel], set(), set()
    while todo:
        name = todo.pop()
        if name in seen or name not in state.functions:
            continue
        seen.add(name)
        names, tests = state.functions[name]
        used |= names
        tested |= tests
        todo.extend(names & state.functions.keys())
    return sorted(fc.index for fc in state.constants.values()
                  if fc.name in used and fc.name not in tested)


def _rewrite_program_constants(f: _File) -> None:
    """A declaration starting with ``constant`` (program-scope constants, and
    ``constant T* p = ...`` locals) gets C++ ``const``: MSL program-scope constants
    are compile-time constants (``constant uint TILE = 16;`` sizes arrays), while
    the shim's ``constant`` qualifier expands to nothing."""
    taken = [(s, e) for s, e, _ in f.edits]
    for m in re.finditer(r"(?<![\w.])constant(?=\s+[A-Za-z_])", f.masked):
        if _previous_char(f.masked, m.start()) not in ";{}\0":
            continue   # a parameter or a cast
        if any(s <= m.start() < e for s, e in taken):
            continue   # a function constant, rewritten already
        f.replace(m.start(), m.end(), "const   ")


def _blank_msl_attributes(f: _File) -> None:
    taken = {(s, e) for s, e, _ in f.edits}
    for start, end, items in _attributes(f):
        if any(s <= start < e for s, e in taken):
            continue
        if items and all(key in _CXX_ATTRIBUTES for key, _ in items):
            continue
        f.blank(start, end)


def _translate(pre: Preprocessed, state: State) -> str:
    """The rewritten preprocessed source, with ``#line`` directives back to the
    original files (see _with_line_directives)."""
    f = _File(pre)
    msl_syntax.merge_const_constant(f)
    msl_syntax.rewrite_range_designators(f)
    msl_syntax.drop_unroll_pragmas(f)
    _rewrite_threadgroup_declarations(f, state)
    _rewrite_function_constants(f, state)
    _rewrite_program_constants(f)
    _find_kernels(f, state)
    _find_instantiations(f, state)
    _record_function_uses(f, state)
    msl_restrictions.check(f.masked, f.where)
    _blank_msl_attributes(f)
    return _with_line_directives(f.result().split("\n"), pre)


def _with_line_directives(lines: list[str], pre: Preprocessed) -> str:
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
            out.append(f'#line 1 "{_c_string(path)}"')
            out.extend([""] * (line - 1))
        elif continues and not entered:
            out.extend([""] * (line - cur_line - 1))
        else:
            out.append(f'#line {line} "{_c_string(path)}"')
        out.append(text)
        cur_file, cur_line = path, line
    return "\n".join(out)


def _c_string(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


# ---- emission ----

def _entry(index: int, callee: str, kernel: KernelDef) -> str:
    args = []
    for i, p in enumerate(kernel.params):
        t = f"A::at<{i}>"
        if p.kind == "buffer":
            args.append(f"::metalrt::sim::bind_address<{t}>(c.buffers[{p.index}])")
        elif p.kind == "threadgroup":
            args.append(f"::metalrt::sim::bind_address<{t}>(c.threadgroup_buffers[{p.index}])")
        else:
            member, size = _POSITIONS[p.kind]
            if size == 0:
                args.append(f"static_cast<{t}>(c.{member})")
            else:
                args.append(f"::metalrt::sim::bind_position<{t}, {p.components}>(c.{member})")
    joined = ",\n      ".join(args)
    return (f"void metalrt_kernel_{index}(const ::metalrt::sim::ThreadContext& c) {{\n"
            f"  using A = ::metalrt::sim::FnArgs<decltype(&{callee})>;\n"
            f"  {callee}(\n      {joined});\n"
            f"}}\n")


def _registered(state: State, source_path: str) -> list[tuple[str, str, KernelDef, str]]:
    """(host name, callee, definition, location) of every kernel the module registers:
    the non-template kernels and the explicit instantiations."""
    registered = []
    for k in state.kernels.values():
        if not k.is_template:
            registered.append((k.host_name or k.name, k.name, k, k.location))
    for inst in state.instantiations:
        k = state.kernels.get(inst.kernel)
        if k is None:
            raise MslError(f"{inst.location}: error: '{inst.kernel}' is not a kernel template "
                           "defined in this file or its included headers")
        registered.append((inst.host_name, f"{inst.kernel}<{inst.template_args}>", k, inst.location))
    names = [r[0] for r in registered]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise MslError(f"{source_path}:1: error: kernel name(s) registered twice: {sorted(dup)}")
    return registered


def generate(source_path: str, mode: str = "builtin", defines: dict | None = None,
             include_dirs: list[str] | None = None, cxx: str | None = None
             ) -> tuple[str, list[str]]:
    """Translates the MSL file ``source_path``.

    Args:
        source_path: the ``.metal`` file.
        mode: "builtin" (a kernel file of the package) or "shared" (compile_shader).
        defines: preprocessor macros, name -> value or None (see msl_preprocess).
        include_dirs: directories searched for quoted includes.
        cxx: the C++ compiler whose preprocessor runs (default ``$CXX`` or ``c++``).

    Returns:
        (C++ translation unit, the source and every project header it included).

    Raises:
        MslError: at ``file:line``, for MSL the generator cannot translate or that
            Metal's compiler rejects (msl_restrictions).
    """
    state = State()
    pre = preprocess(source_path, defines, include_dirs, cxx)
    body = _translate(pre, state)
    registered = _registered(state, source_path)

    # sim_module.h (standard headers) goes first: the shim's address-space macros
    # (`device`, `thread`, ...) would break standard headers included after them.
    out = [f"// Generated by metalrt/_sim/msl_to_cpp.py from {source_path}. Do not edit.",
           '#include "sim_module.h"', "#include <metal_stdlib>"]
    out += [f"#include <{name}>" for name in pre.system_includes if name != "metal_stdlib"]
    out += ["namespace {",
            f'#line 1 "{_c_string(source_path)}"', body, "", "}  // namespace",
            "namespace {"]
    for i, (_, callee, k, _) in enumerate(registered):
        out.append(_entry(i, callee, k))
    fc_index = {fc.name: fc.index for fc in state.constants.values()}
    kernel_rows = []
    for i, (host, _, k, where) in enumerate(registered):
        uses = []
        for p in k.params:
            if p.kind != "buffer":
                continue
            if p.guard is not None and p.guard not in fc_index:
                raise MslError(f"{where}: error: kernel '{k.name}': '{p.guard}' is not a "
                               "function constant")
            uses.append(f"{{{p.index}u, {fc_index[p.guard] if p.guard else -1}}}")
        out.append(f"const ::metalrt::sim::BufferUse metalrt_buffers_{i}[] = "
                   f"{{{', '.join(uses) or '{0u, -2}'}}};")
        required = _required_constants(k.name, state)
        out.append(f"const uint32_t metalrt_required_{i}[] = "
                   f"{{{', '.join(f'{r}u' for r in required) or '0u'}}};")
        tg_bits = sum(1 << p.index for p in k.params if p.kind == "threadgroup")
        kernel_rows.append(f'  {{"{host}", &metalrt_kernel_{i}, metalrt_buffers_{i}, '
                           f"{len(uses)}u, {tg_bits}u, \"{_c_string(where)}\", "
                           f"metalrt_required_{i}, {len(required)}u}},")
    out.append("const ::metalrt::sim::KernelInfo metalrt_kernels[] = {")
    out += kernel_rows or ['  {"", nullptr, nullptr, 0u, 0u, "", nullptr, 0u},']
    out.append("};")
    out.append("const ::metalrt::sim::FunctionConstantInfo metalrt_constants[] = {")
    for fc in state.constants.values():
        out.append(f'  {{{fc.index}u, "{fc.name}", {_FC_TYPES[fc.type]}u, '
                   f"&metalrt_fc_value_{fc.slot}, &metalrt_fc_defined_{fc.slot}}},")
    if not state.constants:
        out.append('  {0u, "", 0u, nullptr, nullptr},')
    out.append("};")
    out.append("const ::metalrt::sim::ModuleInfo metalrt_module = {\n"
               f'  ::metalrt::sim::kModuleAbiVersion, "{_c_string(source_path)}",\n'
               f"  metalrt_kernels, {len(registered)}u, metalrt_constants, "
               f"{len(state.constants)}u, &::metalrt::sim::g_hooks}};")
    out.append("}  // namespace")
    macro = "METALRT_SIM_BUILTIN_MODULE" if mode == "builtin" else "METALRT_SIM_SHARED_MODULE"
    out.append(f"{macro}(metalrt_module)")
    return "\n".join(out) + "\n", pre.files


def describe(source: str) -> tuple[dict[int, str], dict[str, dict[int, str]]]:
    """What ``compile_shader`` needs to convert Python values, read from MSL source
    text (preprocessed, no include paths) as the generator reads it:
    ``({function-constant index: declared MSL type},
    {kernel host name: {buffer index: declared parameter type}})``, a type as written
    with spaces normalised (``"constant uint2&"``). Raises MslError for source the
    generator rejects."""
    with tempfile.TemporaryDirectory(prefix="metalrt-msl-") as d:
        path = os.path.join(d, "shader.metal")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(source)
        state = State()
        _translate(preprocess(path), state)
        registered = _registered(state, path)
    kernels = {host: {p.index: p.type for p in k.params if p.kind == "buffer"}
               for host, _, k, _ in registered}
    return {fc.index: fc.type for fc in state.constants.values()}, kernels


def function_constant_types(source: str) -> dict[int, str]:
    """``{index: declared MSL type}`` of the ``constant T name [[function_constant(i)]];``
    declarations of MSL source text (see describe)."""
    return describe(source)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("output")
    parser.add_argument("--mode", choices=("builtin", "shared"), default="builtin")
    parser.add_argument("--depfile")
    parser.add_argument("--cxx", help="C++ compiler whose preprocessor runs (default $CXX or c++)")
    parser.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=VALUE]")
    parser.add_argument("-I", dest="include_dirs", action="append", default=[], metavar="DIR")
    args = parser.parse_args(argv)
    defines = dict((d.split("=", 1) + [None])[:2] for d in args.defines)
    try:
        text, files = generate(args.source, args.mode, defines, args.include_dirs, args.cxx)
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
    if args.depfile:
        with open(args.depfile, "w", encoding="utf-8") as fh:
            deps = " ".join(p.replace(" ", "\\ ") for p in files)
            fh.write(f"{args.output}: {deps}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
