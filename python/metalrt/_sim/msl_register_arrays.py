"""Private (thread) arrays that Apple's compiler probably cannot keep in registers: an
array declared in a function body, subscripted with the variable of a ``for`` loop
whose start, bound or step is not known when the pipeline is compiled. Such a loop
cannot be fully unrolled, so the subscript stays dynamic and the array lives in the
thread's stack memory (a load or store per access). Known at pipeline compile time:
literals, program-scope ``constant``/``constexpr`` constants (``METALRT_CONSTANT``),
template parameters, function constants, zero-argument functions returning such an
expression, ``const`` locals initialised with one, and the variables of enclosing
loops that are themselves constant.

A static scan of the preprocessed source (``msl_preprocess``), by pattern and not by
C++ lookup: it reads ``for`` loops only (``while`` loops are not checked) and takes
every function body at file scope. Standard library only; the gate is
tests/python/test_kernel_register_arrays.py."""
from __future__ import annotations

import re
from dataclasses import dataclass

from .msl_file import SourceFile
from .msl_preprocess import preprocess
from .msl_text import match_close, split_top


@dataclass(frozen=True)
class Finding:
    location: str    # "file.metal:line" of the loop
    array: str
    variable: str    # the loop variable in the subscript
    loop: str        # the loop header, spaces normalised

    def __str__(self) -> str:
        return (f"{self.location}: private array '{self.array}' is indexed by '{self.variable}' "
                f"of 'for ({self.loop})', whose bounds are not compile-time or function constants")


# Words that are neither variables nor runtime values in an expression.
_NEUTRAL = {
    "bool", "char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "half", "float",
    "bfloat", "size_t", "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t",
    "int64_t", "uint64_t", "unsigned", "signed", "const", "constexpr", "sizeof", "true", "false",
    "static_cast", "min", "max", "clamp", "abs", "metal",
}
_NOT_TYPES = {"return", "if", "for", "while", "do", "else", "switch", "case", "break",
              "continue", "threadgroup", "constant", "device", "static", "using", "typedef",
              "goto", "throw", "delete", "new", "template", "struct", "class"}
_WORD = re.compile(r"\b[A-Za-z_]\w*\b")


def _is_constant(expr: str, constants: set[str], ignore: str = "") -> bool:
    for m in _WORD.finditer(expr):
        word = m.group()
        if word in _NEUTRAL or word in constants or word == ignore:
            continue
        if expr[:m.start()].rstrip().endswith("."):
            continue   # a member of a value already checked (x.y: x decides)
        return False
    return True


def _file_constants(masked: str) -> set[str]:
    """Program-scope constants, function constants and template parameters, plus the
    zero-argument functions that return an expression of them."""
    names = set(re.findall(r"\b(?:constant|constexpr)\s+(?:[\w:<>,]+\s+)*?(\w+)\s*(?:=|\{|\[)", masked))
    for params in re.findall(r"\btemplate\s*<([^<>]*)>", masked):
        names.update(re.findall(r"(\w+)\s*(?:=[^,]*)?(?:,|$)", params.strip()))
    functions = re.findall(r"(\w+)\s*\(\s*\)\s*\{\s*return\s+([^;]*);\s*\}", masked)
    while True:   # a constant function may call another
        found = {name for name, expr in functions if name not in names and _is_constant(expr, names)}
        if not found:
            return names
        names |= found


def _function_bodies(masked: str):
    """(start, end) of every function body at file scope: a '{' at depth 0 after ')'."""
    depth, i = 0, 0
    while i < len(masked):
        c = masked[i]
        if c == "{":
            if depth == 0 and re.search(r"\)\s*(?:const\s*)?$", masked[max(0, i - 100):i]):
                end = match_close(masked, i, "{", "}")
                if end < 0:
                    return
                yield i, end
                i = end + 1
                continue
            depth += 1
        elif c == "}":
            depth -= 1
        i += 1


def _statement_end(masked: str, pos: int) -> int:
    """Index just past the statement starting at or after ``pos`` (a block, a control
    statement with its body, or up to its ';')."""
    while masked[pos].isspace():
        pos += 1
    if masked[pos] == "{":
        return match_close(masked, pos, "{", "}") + 1
    control = re.match(r"(for|while|if|switch)\s*\(", masked[pos:])
    if control:
        close = match_close(masked, pos + control.end() - 1, "(", ")")
        end = _statement_end(masked, close + 1)
        if control.group(1) == "if":
            other = re.match(r"\s*else\b", masked[end:])
            if other:
                end = _statement_end(masked, end + other.end())
        return end
    other = re.match(r"else\b", masked[pos:])
    if other:
        return _statement_end(masked, pos + other.end())
    depth = 0
    while pos < len(masked):
        c = masked[pos]
        depth += c in "([{"
        depth -= c in ")]}"
        if c == ";" and depth == 0:
            return pos + 1
        pos += 1
    return pos


def _declarations(body: str):
    """(position, const?, [(name, is_array, initialiser)]) of each declaration
    statement of a body that is not in the threadgroup/device/constant address space."""
    for m in re.finditer(r"(?:^|(?<=[;{}]))\s*((?:const\s+|constexpr\s+|thread\s+)*)"
                         r"([A-Za-z_][\w:]*(?:\s*<[^;{}()]*?>)?)\s+([A-Za-z_][^;{}]*);", body):
        if m.group(2) in _NOT_TYPES or m.group(2) in ("const", "constexpr"):
            continue
        declarators = []
        for part in split_top(m.group(3)):
            d = re.match(r"\s*(?:[*&]\s*)?([A-Za-z_]\w*)\s*(\[)?[^=]*(?:=(.*))?$", part, re.S)
            if not d:
                break
            declarators.append((d.group(1), bool(d.group(2)), d.group(3) or ""))
        else:
            yield m.start(3), "const" in m.group(1).split() or "constexpr" in m.group(1).split(), declarators


def scan_function(f: SourceFile, start: int, end: int, file_constants: set[str]) -> list[Finding]:
    body = f.masked[start:end]
    arrays, constants = set(), set(file_constants)
    for _, is_const, declarators in _declarations(body):
        for name, is_array, init in declarators:
            if is_array:
                arrays.add(name)
            elif is_const and init and _is_constant(init, constants):
                constants.add(name)
    findings: list[Finding] = []
    constant_loops: list[tuple[int, int, str]] = []   # (body start, body end, variable)
    for m in re.finditer(r"\bfor\s*\(", body):
        open_paren = m.end() - 1
        close = match_close(body, open_paren, "(", ")")
        header = body[open_paren + 1:close]
        parts = header.split(";")
        var = re.match(r"\s*(?:[\w:]+\s+)*?(\w+)\s*=", parts[0])
        if len(parts) != 3 or not var:
            continue
        variable = var.group(1)
        loop_end = _statement_end(body, close + 1)
        enclosing = {v for s, e, v in constant_loops if s <= m.start() < e}
        init = parts[0][var.end():]
        if all(_is_constant(p, constants | enclosing, variable) for p in (init, parts[1], parts[2])):
            constant_loops.append((close + 1, loop_end, variable))
            continue
        loop_body = body[close + 1:loop_end]
        for name in sorted(arrays):
            for sub in re.finditer(rf"\b{name}\s*\[", loop_body):
                index_end = match_close(loop_body, sub.end() - 1, "[", "]")
                subscripts = loop_body[sub.end() - 1:index_end + 1]
                nxt = re.match(r"(\s*\[[^\]]*\])+", loop_body[index_end + 1:])
                if nxt:
                    subscripts += nxt.group()
                if re.search(rf"\b{variable}\b", subscripts):
                    findings.append(Finding(f.where(start + m.start()), name, variable,
                                            " ".join(header.split())))
                    break
    return findings


def scan_source(f: SourceFile) -> list[Finding]:
    """The findings of a preprocessed source, in file order."""
    constants = _file_constants(f.masked)
    findings: list[Finding] = []
    for start, end in _function_bodies(f.masked):
        findings += scan_function(f, start, end + 1, constants)
    return findings


def scan(path: str, include_dirs: list[str] | None = None) -> list[Finding]:
    """The findings of the MSL file ``path``, its quoted headers resolved as the
    generator resolves them. Raises msl_restrictions.MslError if it does not
    preprocess."""
    return scan_source(SourceFile(preprocess(path, None, include_dirs)))
