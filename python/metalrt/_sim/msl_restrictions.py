"""What Apple's Metal compiler rejects but a C++ compiler accepts, checked on
preprocessed MSL (comments and literals masked, so a word in a string or comment is
never flagged).

The simulated device compiles MSL as C++, so without these checks a kernel using
``double`` or a plain program-scope ``constexpr`` passes every Linux gate and then
fails to compile on the first Mac. Each rule names the construct and the section of
the Metal Shading Language Specification (version 3.1, the version we target) that
excludes it; a violation is an :class:`MslError` at ``file:line``.

What is not checked (allowed by MSL 3.1, or not decidable on tokens) is listed in
``docs/simulated-device.md``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterator

if __package__:
    from .msl_text import blank_attributes, match_close
else:   # imported by msl_to_cpp.py run as a script
    from msl_text import blank_attributes, match_close


class MslError(Exception):
    """MSL the generator cannot translate or Metal would reject, at ``file:line``."""


SECTION_RESTRICTIONS = 'MSL 3.1 §1.5.4 "Metal Restrictions"'
SECTION_STDLIB = 'MSL 3.1 §1.5.4 "Metal Restrictions" and §6 "Metal Standard Library"'
SECTION_SCALARS = 'MSL 3.1 §2.1 "Scalar Data Types"'
SECTION_CONSTANT = 'MSL 3.1 §4.2 "constant Address Space"'
SECTION_LIMITS = 'MSL 3.1 §6.18 "Numeric Limits"'

# <climits>' macros and the double ones of <cfloat>: Metal's headers do not define them
# (the sim gets them from the C headers). MSL's own FLT_* and HALF_* constants stay allowed.
_C_LIMIT_MACROS = (r"\b(?:CHAR_BIT|MB_LEN_MAX|S?CHAR_M(?:AX|IN)|UCHAR_MAX|SHRT_M(?:AX|IN)|USHRT_MAX|"
                   r"INT_M(?:AX|IN)|UINT_MAX|L?LONG_M(?:AX|IN)|UL?LONG_MAX|L?DBL_[A-Z0-9_]+)\b")


# Words that start a namespace-scope statement declaring no variable.
_NOT_VARIABLES = {"typedef", "using", "template", "struct", "class", "union", "enum",
                  "namespace", "static_assert", "extern", "friend"}


def _variable(head: str) -> str | None:
    """The variable a declaration head (text before its initializer or ``;``) declares
    outside the constant address space, or None (a function, type, alias, or a
    ``constant`` variable)."""
    words = re.findall(r"[A-Za-z_]\w*", head)
    if not words or words[0] in _NOT_VARIABLES or "constant" in words or "(" in head:
        return None
    return words[-1]


def _namespace_scope_violations(code: str):
    """(position, name) of every namespace-scope variable not declared ``constant``.
    Function bodies, class bodies and initializers are skipped whole; a namespace's
    braces are entered."""
    start, i, n = 0, 0, len(code)
    while i < n:
        c = code[i]
        if c == "{":
            head = code[start:i]
            if re.search(r"\bnamespace\b[\w\s:]*$|\bextern\s*\"\s*\"\s*$", head):
                start = i + 1
            else:
                close = match_close(code, i, "{", "}")
                if close < 0:
                    return   # an unclosed brace: the C++ compile names the error
                is_type = "(" not in head and re.search(r"\b(struct|class|union|enum)\b", head)
                if "=" not in head and not is_type:
                    start = close + 1   # a function body ends its statement
                i = close
        elif c == "}":
            start = i + 1   # the end of a namespace
        elif c == ";":
            head = re.split(r"[=\[{]", code[start:i], maxsplit=1)[0]
            name = _variable(head)
            if name is not None:
                yield start + len(code[start:i]) - len(code[start:i].lstrip()), name
            start = i + 1
        i += 1


def _static_violations(code: str):
    """(position, name) of every ``static`` variable (local or member) not in the
    constant address space; a static member function is not one."""
    for m in re.finditer(r"\bstatic\b", code):
        end = re.compile(r"[;{(=]").search(code, m.end())
        if end is None or code[end.start()] in "({":
            continue
        head = code[m.end():end.start()]
        begin = max(code.rfind(c, 0, m.start()) for c in ";{}") + 1
        if "constant" in re.findall(r"\w+", code[begin:end.start()]):
            continue   # `static constant T x`, `constexpr constant static T x`
        words = re.findall(r"[A-Za-z_]\w*", re.split(r"\[", head)[0])
        if words:
            yield m.start(), words[-1]


def _token(pattern: str) -> Callable[[str], Iterator[tuple[int, str]]]:
    compiled = re.compile(pattern)
    return lambda code: ((m.start(), m.group()) for m in compiled.finditer(code))


@dataclass(frozen=True)
class Rule:
    """A construct Metal rejects: ``find(code)`` yields (position, name) of each use;
    ``message`` (with ``{name}``) says what it is."""
    message: str
    section: str
    find: Callable[[str], Iterator[tuple[int, str]]]


def _unsupported(construct: str, section: str, pattern: str) -> Rule:
    """A rule for a token pattern: ``construct`` (with ``{name}``, the matched text)."""
    return Rule(f"{construct} is not supported in Metal", section, _token(pattern))


# Matched on masked text with [[attributes]] blanked; `= delete` (a deleted function)
# is C++ Metal keeps, the `delete` operator is not.
RULES = (
    _unsupported("the double type", SECTION_SCALARS, r"\bdouble\b"),
    _unsupported("the long long type", SECTION_SCALARS, r"\blong\s+long\b"),
    _unsupported("the C++ standard library (std::)", SECTION_STDLIB, r"\bstd\s*::"),
    _unsupported("the new operator", SECTION_RESTRICTIONS, r"\bnew\b"),
    _unsupported("the delete operator", SECTION_RESTRICTIONS, r"(?<!=)(?<!=\s)\bdelete\b"),
    _unsupported("exception handling ({name})", SECTION_RESTRICTIONS, r"\b(?:try|catch|throw)\b"),
    _unsupported("virtual functions", SECTION_RESTRICTIONS, r"\bvirtual\b"),
    _unsupported("the {name} storage class", SECTION_RESTRICTIONS, r"\b(?:thread_local|register)\b"),
    _unsupported("the goto statement", SECTION_RESTRICTIONS, r"\bgoto\b"),
    _unsupported("the dynamic_cast operator", SECTION_RESTRICTIONS, r"\bdynamic_cast\b"),
    _unsupported("type identification (typeid)", SECTION_RESTRICTIONS, r"\btypeid\b"),
    _unsupported("a function named main", SECTION_RESTRICTIONS, r"\bmain\s*\("),
    Rule("the C limit macro {name} is not defined by Metal's headers (use metal::numeric_limits<T>)",
         SECTION_LIMITS, _token(_C_LIMIT_MACROS)),
    Rule("program-scope variable '{name}' must be declared in the constant address space "
         "(`constant constexpr`; METALRT_CONSTANT of metal/metal_constants.h in shared headers)",
         SECTION_CONSTANT, _namespace_scope_violations),
    Rule("static variable '{name}' must be declared in the constant address space",
         SECTION_CONSTANT, _static_violations),
)


def check(masked: str, where: Callable[[int], str]) -> None:
    """Raises MslError for the first construct of ``masked`` (preprocessed source,
    comments and literals blanked) that Metal rejects; ``where(pos)`` is ``file:line``."""
    code = blank_attributes(masked)
    found = []
    for rule in RULES:
        first = next(rule.find(code), None)
        if first is not None:
            found.append((first[0], rule.message.format(name=first[1]) + f" ({rule.section})"))
    if found:
        pos, message = min(found)
        raise MslError(f"{where(pos)}: error: {message}")
