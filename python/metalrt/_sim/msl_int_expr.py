"""Integer constant expressions in MSL attributes (``[[buffer(BASE + 1)]]``,
``[[function_constant(FC_UNARY + 0)]]``), evaluated after preprocessing with C++
semantics: integer literals (decimal, hex, octal, binary, with u/l suffixes and '
separators), parentheses, unary ``+ - ~ !``, and the binary arithmetic, shift,
bitwise, comparison and logical operators and ``?:`` (C++17 [expr.const]; division
truncates toward zero). Names are not resolved: a macro has been expanded by then,
and a ``constexpr`` variable as an index is reported as unsupported.
"""
from __future__ import annotations

import ast
import re

_LITERAL = re.compile(r"\b(0[xX][0-9a-fA-F']+|0[bB][01']+|\d[\d']*)(?:[uU][lL]{0,2}|[lL]{1,2}[uU]?)?\b")
_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
           ast.Mult: lambda a, b: a * b, ast.LShift: lambda a, b: a << b,
           ast.RShift: lambda a, b: a >> b, ast.BitAnd: lambda a, b: a & b,
           ast.BitOr: lambda a, b: a | b, ast.BitXor: lambda a, b: a ^ b}
_COMPARE = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
            ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
            ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}


def _python(expr: str) -> str:
    """C++ operators and literals spelled as Python's."""
    def literal(m: re.Match) -> str:
        digits = m.group(1).replace("'", "")
        if len(digits) > 1 and digits[0] == "0" and digits[1].isdigit():
            return str(int(digits, 8))
        return str(int(digits, 0))
    text = _LITERAL.sub(literal, expr)
    text = text.replace("&&", " and ").replace("||", " or ")
    text = re.sub(r"!(?!=)", " not ", text)
    # a ? b : c -> (b if a else c), right-associative, one level per pass
    while "?" in text:
        m = re.search(r"([^?:()]+)\?([^?:()]+):([^?:()]+)$", text) or \
            re.search(r"\(([^?:()]+)\?([^?:()]+):([^?:()]+)\)", text)
        if not m:
            raise ValueError("unsupported ?: nesting")
        text = text[:m.start()] + f"(({m.group(2)}) if ({m.group(1)}) else ({m.group(3)}))" + text[m.end():]
    return text


def _eval(node: ast.AST) -> int:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand)
        ops = {ast.UAdd: v, ast.USub: -v, ast.Invert: ~v, ast.Not: int(not v)}
        return ops[type(node.op)]
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left), _eval(node.right)
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            if b == 0:
                raise ValueError("division by zero")
            q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
            return q if not isinstance(node.op, ast.Mod) else a - q * b
        return _BINARY[type(node.op)](a, b)
    if isinstance(node, ast.BoolOp):
        values = [_eval(v) for v in node.values]
        return int(all(values) if isinstance(node.op, ast.And) else any(values))
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return int(_COMPARE[type(node.ops[0])](_eval(node.left), _eval(node.comparators[0])))
    if isinstance(node, ast.IfExp):
        return _eval(node.body) if _eval(node.test) else _eval(node.orelse)
    raise ValueError("not an integer constant expression")


def evaluate(expr: str) -> int:
    """The value of the integer constant expression ``expr``; ValueError if it is not
    one (a name, a float, a call) or divides by zero."""
    name = re.search(r"[A-Za-z_]\w*", _LITERAL.sub("0", expr))
    if name:
        raise ValueError(f"'{name.group()}' is neither an integer literal nor a macro")
    try:
        tree = ast.parse(_python(expr).strip(), mode="eval")
        return _eval(tree)
    except (SyntaxError, KeyError, TypeError, RecursionError) as e:
        raise ValueError("not an integer constant expression") from e
