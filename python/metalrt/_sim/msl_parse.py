"""What an MSL source declares, read from its preprocessed text (``SourceFile``):
the kernels with their parameters bound by attribute (MSL §5.2), the explicit
kernel instantiations, the function constants, and which identifiers each function
body names (for the constants a kernel requires). Reading only: the rewrites
(``msl_rewrite``) and the generated tables and reflection (``msl_emit``) use what
this finds."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

if __package__:
    from .msl_file import SourceFile
    from .msl_int_expr import evaluate
    from .msl_restrictions import MslError
    from .msl_text import attribute_items, blank_attributes, mask, match_close, split_top, statement_start
else:   # imported by msl_to_cpp.py run as a script
    from msl_file import SourceFile
    from msl_int_expr import evaluate
    from msl_restrictions import MslError
    from msl_text import attribute_items, blank_attributes, mask, match_close, split_top, statement_start

# Attributes of kernel parameters: name -> (ThreadContext field, components).
POSITIONS = {
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
# MSL 3.1 §4: every pointer or reference argument of a kernel names its address space.
ADDRESS_SPACES = {"device", "constant", "threadgroup", "thread", "threadgroup_imageblock",
                  "ray_data", "object_data"}
SECTION_ADDRESS_SPACES = 'MSL 3.1 §4 "Address Spaces"'
# Function-constant types: name -> byte size.
FC_TYPES = {"bool": 1, "char": 1, "uchar": 1, "short": 2, "ushort": 2, "half": 2,
            "int": 4, "uint": 4, "float": 4, "int16_t": 2, "uint16_t": 2,
            "int32_t": 4, "uint32_t": 4}


@dataclass
class Param:
    name: str
    kind: str          # "buffer", "threadgroup" or a POSITIONS key
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
    keyword: tuple[int, int] | None   # span of a `kernel` keyword (not [[kernel]])
    max_threads: int = 0   # [[max_total_threads_per_threadgroup(N)]]; 0: none declared


@dataclass
class Instantiation:
    kernel: str
    template_args: str
    host_name: str
    location: str
    keyword: tuple[int, int] | None   # span of a `kernel` keyword in the statement


@dataclass
class FunctionConstant:
    index: int
    name: str
    type: str
    slot: int
    declaration: tuple[int, int]   # span of `constant T name [[function_constant(i)]];`


@dataclass
class Program:
    kernels: dict[str, KernelDef] = field(default_factory=dict)
    instantiations: list[Instantiation] = field(default_factory=list)
    constants: dict[str, FunctionConstant] = field(default_factory=dict)
    # Per function name (overloads and template specialisations merged): the
    # identifiers its body names and the function constants it tests with
    # is_function_constant_defined.
    functions: dict[str, tuple[set[str], set[str]]] = field(default_factory=dict)


def parse(f: SourceFile) -> Program:
    program = Program()
    _find_function_constants(f, program)
    _find_kernels(f, program)
    _find_instantiations(f, program)
    _record_function_uses(f, program)
    return program


def _parse_params(f: SourceFile, open_paren: int, close_paren: int, kernel: str) -> list[Param]:
    params: list[Param] = []
    text = f.text[open_paren + 1:close_paren]
    masked = f.masked[open_paren + 1:close_paren]
    offset = open_paren + 1
    pos = 0
    for part in split_top(masked):
        start = offset + pos + len(part) - len(part.lstrip())   # the parameter's own line
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
            elif key in POSITIONS:
                vector = re.search(r"([234])\s*>?\s*$", type_text)
                components = int(vector.group(1)) if vector else 1
                param = Param(name, key, components=components)
            elif key == "function_constant":
                guard = arg
            else:
                raise f.error(start, f"kernel '{kernel}': unsupported attribute [[{key}]] "
                                     f"on parameter '{name}'")
        words = re.findall(r"\w+", type_text)
        if re.search(r"[*&]", type_text) and not ADDRESS_SPACES & set(words):
            raise f.error(start, f"kernel '{kernel}': parameter '{name}' is a pointer or reference "
                                 "without an address space (device, constant, threadgroup or "
                                 f"thread) ({SECTION_ADDRESS_SPACES})")
        if param is None and ("device" in words or "constant" in words):
            param = Param(name, "buffer", None)        # Metal assigns the index
        elif param is None and "threadgroup" in words:
            param = Param(name, "threadgroup", None)
        if param is None:
            raise f.error(start, f"kernel '{kernel}': parameter '{name}' is neither in the device, "
                                 "constant or threadgroup address space nor has a position "
                                 "attribute")
        if param.index is not None and param.index >= 31:
            raise f.error(start, f"kernel '{kernel}': [[{param.kind}({param.index})]] is out "
                                 f"of range: Metal's {param.kind} indices are 0..30")
        if guard is not None and param.kind != "buffer":
            raise f.error(start, f"kernel '{kernel}': function_constant on a non-buffer "
                                 f"parameter '{name}' is not supported")
        param.guard = guard
        param.type = " ".join(type_text.split())
        params.append(param)
    _assign_implicit_indices(f, open_paren, kernel, params)
    return params


def _assign_implicit_indices(f: SourceFile, where: int, kernel: str, params: list[Param]) -> None:
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
                    raise f.error(where, f"kernel '{kernel}': parameter '{p.name}' has no free "
                                         f"{kind} index: Metal's are 0..30")


def _index(f: SourceFile, pos: int, what: str, expr: str) -> int:
    """The value of an attribute's integer constant expression (macros expanded)."""
    try:
        value = evaluate(expr)
    except ValueError as e:
        raise f.error(pos, f"{what} needs an integer constant expression: {e}") from None
    if value < 0:
        raise f.error(pos, f"{what} is negative ({value})")
    return value


def _find_kernels(f: SourceFile, program: Program) -> None:
    """Kernel definitions (``kernel void f(`` or ``[[kernel]] void f(``)."""
    pattern = re.compile(r"(\bkernel\b|\[\[\s*kernel\s*\]\])\s*void\s+(\w+)\s*\(")
    for m in pattern.finditer(f.masked):
        start = statement_start(f.masked, m.start())
        prefix = f.masked[start:m.start()]
        name = m.group(2)
        open_paren = m.end() - 1
        close_paren = match_close(f.masked, open_paren, "(", ")")
        if close_paren < 0:
            raise f.error(m.start(), f"kernel '{name}': unbalanced parentheses")
        after = f.masked[close_paren + 1:].lstrip()
        if not after.startswith("{"):
            continue   # a declaration
        if name in program.kernels:
            raise f.error(m.start(), f"kernel '{name}' defined twice")
        host = re.search(r'host_name\s*\(\s*"([^"]*)"', f.text[start:m.start()])
        program.kernels[name] = KernelDef(
            name, _parse_params(f, open_paren, close_paren, name),
            is_template=bool(re.search(r"\btemplate\s*<", prefix)),
            host_name=host.group(1) if host else None, location=f.where(m.start()),
            keyword=m.span(1) if m.group(1) == "kernel" else None,
            max_threads=_max_threads(f, start, m.start(), name))


# Metal's largest threadgroup (MTLDevice.maxThreadsPerThreadgroup on Apple GPUs).
MAX_THREADS_PER_THREADGROUP = 1024


def _max_threads(f: SourceFile, start: int, end: int, kernel: str) -> int:
    """N of a ``[[max_total_threads_per_threadgroup(N)]]`` before the kernel's name, 0
    without one; N is an integer constant expression in 1..1024. A pipeline's
    maxTotalThreadsPerThreadgroup is then N (Apple: MTLComputePipelineDescriptor
    .maxTotalThreadsPerThreadgroup must equal the attribute when both are set)."""
    found = 0
    for m in re.finditer(r"\[\[(.*?)\]\]", f.masked[start:end], re.S):
        for key, arg in attribute_items(f.text[start + m.start(1):start + m.end(1)]):
            if key != "max_total_threads_per_threadgroup":
                continue
            what = f"kernel '{kernel}': [[max_total_threads_per_threadgroup({arg})]]"
            found = _index(f, start + m.start(), what, arg)
            if not 1 <= found <= MAX_THREADS_PER_THREADGROUP:
                raise f.error(start + m.start(), f"{what} must be 1 to "
                                                 f"{MAX_THREADS_PER_THREADGROUP}, got {found}")
    return found


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


def _find_instantiations(f: SourceFile, program: Program) -> None:
    """Explicit kernel instantiations written out in the file."""
    code = mask(f.text, keep_literals=True)
    for m in re.finditer(r"\btemplate\s*(?=\[\[)", f.masked):
        end = f.masked.find(";", m.end())
        if end < 0:
            raise f.error(m.start(), "explicit instantiation without ';'")
        parsed = _parse_instantiation(code[m.start():end])
        if isinstance(parsed, str):
            raise f.error(m.start(), parsed)
        statement = blank_attributes(f.masked[m.start():end])
        kernel_word = re.search(r"\bkernel\b", statement)
        keyword = (m.start() + kernel_word.start(), m.start() + kernel_word.end()) if kernel_word else None
        program.instantiations.append(Instantiation(*parsed, f.where(m.start()), keyword))


def _find_function_constants(f: SourceFile, program: Program) -> None:
    """``constant T name [[function_constant(i)]];`` declarations (an attribute on a
    kernel parameter guards a buffer instead, read by _parse_params)."""
    for start, end, items in f.attributes():
        fc = [arg for key, arg in items if key == "function_constant"]
        if not fc:
            continue
        stmt = statement_start(f.masked, start)
        head = f.masked[stmt:start]
        stmt += len(head) - len(head.lstrip())
        decl = re.fullmatch(r"\s*constant\s+([\w: ]+?)\s+(\w+)\s*", head)
        if not decl:
            continue
        semi = f.masked.find(";", end)
        if f.masked[end:semi].strip():
            raise f.error(start, "a function constant declaration takes no initializer")
        index = _index(f, start, f"[[function_constant({fc[0]})]]", fc[0])
        type_text = " ".join(decl.group(1).split())
        if type_text not in FC_TYPES:
            raise f.error(start, f"function constant type '{type_text}' is not supported "
                                 f"(supported: {', '.join(sorted(FC_TYPES))})")
        name = decl.group(2)
        program.constants[name] = FunctionConstant(index, name, type_text, len(program.constants),
                                                   (stmt, semi + 1))


# Words followed by ``(...) {`` that do not name a function body.
_NOT_FUNCTIONS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "alignof",
                  "decltype", "static_assert"}
TESTED = re.compile(r"\bis_function_constant_defined\s*\(\s*(\w+)\s*\)")


def _record_function_uses(f: SourceFile, program: Program) -> None:
    """What every function body of the file names (``program.functions``): a kernel
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
        names, tested = program.functions.setdefault(name.group(1), (set(), set()))
        tested.update(TESTED.findall(body))
        names.update(re.findall(r"\b[A-Za-z_]\w*", TESTED.sub(" ", body)))


def required_constants(kernel: str, program: Program) -> list[int]:
    """Indices of the function constants ``kernel`` requires: those its body or a
    function it reaches uses, except the ones tested with is_function_constant_defined
    (Apple, MTLFunctionConstant.required: "A function constant is optional only if it
    is referenced in a call to the built-in is_function_constant_defined(name)
    function.")."""
    seen, todo, used, tested = set(), [kernel], set(), set()
    while todo:
        name = todo.pop()
        if name in seen or name not in program.functions:
            continue
        seen.add(name)
        names, tests = program.functions[name]
        used |= names
        tested |= tests
        todo.extend(names & program.functions.keys())
    return sorted(fc.index for fc in program.constants.values()
                  if fc.name in used and fc.name not in tested)


def registered(program: Program, source_path: str) -> list[tuple[str, str, KernelDef, str]]:
    """(host name, callee, definition, location) of every kernel the module registers:
    the non-template kernels and the explicit instantiations."""
    kernels = []
    for k in program.kernels.values():
        if not k.is_template:
            kernels.append((k.host_name or k.name, k.name, k, k.location))
    for inst in program.instantiations:
        k = program.kernels.get(inst.kernel)
        if k is None:
            raise MslError(f"{inst.location}: error: '{inst.kernel}' is not a kernel template "
                           "defined in this file or its included headers")
        kernels.append((inst.host_name, f"{inst.kernel}<{inst.template_args}>", k, inst.location))
    names = [r[0] for r in kernels]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise MslError(f"{source_path}:1: error: kernel name(s) registered twice: {sorted(dup)}")
    return kernels
