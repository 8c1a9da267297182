"""Tool calls in a model's own syntax: parsing them out of generated text, and the Lark
grammar (llguidance) that forces one when ``tool_choice`` is ``required`` or names a
function.

The formats, as the models' chat templates teach them:

* ``hermes`` (Hermes 2/3, Qwen2.5, Qwen3): ``<tool_call>\\n{"name": ..., "arguments":
  {...}}\\n</tool_call>``, one block per call;
* ``qwen3_coder`` (Qwen3-Coder): ``<tool_call>\\n<function=NAME>\\n<parameter=P>\\nVALUE
  \\n</parameter>\\n</function>\\n</tool_call>``, a value raw text for a string
  parameter and JSON otherwise;
* ``llama3_json`` (Llama 3.1-3.3): the whole reply is ``{"name": ..., "parameters":
  {...}}`` (optionally after ``<|python_tag|>``; several joined by ``;``);
* ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``, or from the
  v11 tokenizers on ``[TOOL_CALLS]NAME[ARGS]{...}`` per call.

``parser_for(template)`` picks one from the chat template's text; a template that knows
no tools gets ``hermes`` (the server then describes the tools in a system message).
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .grammar import lark_json


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: the function ``name`` and its ``arguments`` as a JSON text."""

    name: str
    arguments: str
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def openai(self) -> dict:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


def _call(name, arguments) -> Optional[ToolCall]:
    if not isinstance(name, str) or not name:
        return None
    if isinstance(arguments, str):   # some models emit the arguments as a JSON text
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(name, json.dumps(arguments, ensure_ascii=False))


def _json_prefix(text: str):
    """(the JSON value at the start of ``text``, the rest) or (None, text)."""
    try:
        value, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None, text
    return value, text[end:]


def _lark_string(text: str) -> str:
    return json.dumps(text)


def _alternatives(items: Sequence[str]) -> str:
    return "(" + " | ".join(items) + ")"


def held_prefix(text: str, marker: str) -> int:
    """Characters at the end of ``text`` that could begin ``marker``."""
    return max((k for k in range(1, len(marker)) if text.endswith(marker[:k])), default=0)


class ToolParser:
    """``start``: the text that opens the tool-call part of a reply (what comes before
    it is content); ``end``: the text that closes one call, if the format has one;
    ``calls(part, tools)``: the calls of a tool-call part ([] when it does not parse);
    ``grammar(tools, parallel)``: the Lark grammar of a reply that is only calls;
    ``example``: the syntax as a system prompt shows it."""

    name = start = end = example = ""

    def held(self, text: str) -> int:
        """Characters at the end of content ``text`` to hold back: they may begin
        ``start``."""
        return held_prefix(text, self.start)

    def split(self, text: str) -> Tuple[str, Optional[str]]:
        """(content, the tool-call part from ``start`` on, or None when there is none)."""
        i = text.find(self.start)
        return (text, None) if i < 0 else (text[:i], text[i:])

    def calls(self, part: str, tools: Dict[str, dict]) -> List[ToolCall]:
        raise NotImplementedError

    # The head of a call object, up to where its arguments begin.
    _head = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)+)"\s*,\s*'
                       r'"(?:arguments|parameters)"\s*:\s*')

    def cut(self, part: str, tools: Dict[str, dict]) -> Tuple[List[ToolCall], Optional[ToolCall]]:
        """(the whole calls, the cut one) of a tool-call part that ``max_tokens`` ended:
        the cut call's arguments are the JSON text written so far, as OpenAI returns
        a call cut by the length limit. None when the cut left no function name."""
        last = next(reversed(list(self._head.finditer(part))), None)
        if last is None or isinstance(_json_prefix(part[last.start():])[0], dict):
            return self.calls(part, tools), None   # the last call is whole
        before = self.calls(self.before(part[:last.start()]), tools)
        return before, ToolCall(json.loads(f'"{last.group(1)}"'), part[last.end():])

    def before(self, text: str) -> str:
        """The whole calls of ``text``, the part before a cut call's object, as
        ``calls`` parses them."""
        return text[:text.rfind(self.start)]

    def opens_call(self, part: str) -> bool:
        """Whether a tool-call part that ``max_tokens`` cut before any function name is
        the start of a call (then it is no content)."""
        return part.lstrip().startswith(self.start)

    def grammar(self, tools: Dict[str, dict], parallel: bool) -> str:
        one = _alternatives([self.call_rule(name, params) for name, params in tools.items()])
        return f"start: {one}" + ("+" if parallel else "")

    def call_rule(self, name: str, parameters: dict) -> str:
        raise NotImplementedError


def _call_schema(name: str, parameters: dict, arguments_key: str) -> dict:
    return {"type": "object", "properties": {"name": {"const": name}, arguments_key: parameters},
            "required": ["name", arguments_key], "additionalProperties": False}


class HermesParser(ToolParser):
    name, start, end = "hermes", "<tool_call>", "</tool_call>"
    example = '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    def calls(self, part, tools):
        # JSON decoding, not a regex: an argument string may itself hold "</tool_call>".
        calls, rest = [], part
        while rest.lstrip().startswith(self.start):
            value, rest = _json_prefix(rest.lstrip()[len(self.start):].lstrip())
            call = _call(value.get("name"), value.get("arguments", value.get("parameters"))) \
                if isinstance(value, dict) else None
            if call is None:
                break
            calls.append(call)
            rest = rest.lstrip()
            rest = rest[len(self.end):] if rest.startswith(self.end) else rest
        return calls

    def call_rule(self, name, parameters):
        return (f'"<tool_call>\\n" {lark_json(_call_schema(name, parameters, "arguments"))} '
                f'"\\n</tool_call>\\n"')


class Qwen3CoderParser(ToolParser):
    name, start, end = "qwen3_coder", "<tool_call>", "</tool_call>"
    example = ("<tool_call>\n<function=<function-name>>\n<parameter=<name>>\n<value>\n"
               "</parameter>\n</function>\n</tool_call>")
    _function = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", re.S)
    _parameter = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?(?:</parameter>|(?=<parameter=)|$)",
                            re.S)

    def calls(self, part, tools):
        calls = []
        for name, body in self._function.findall(part):
            properties = tools.get(name, {}).get("properties", {})
            arguments = {}
            for key, raw in self._parameter.findall(body):
                if properties.get(key, {}).get("type") == "string":
                    arguments[key] = raw
                else:
                    value, rest = _json_prefix(raw)
                    arguments[key] = raw if value is None or rest.strip() else value
            calls.append(ToolCall(name.strip(), json.dumps(arguments, ensure_ascii=False)))
        return calls

    def cut(self, part, tools):
        # Parameters are whole at their closing tag; the cut call's arguments are the
        # JSON object of those, left open.
        i = part.rfind("<function=")
        if i < 0 or "</function>" in part[i:]:
            return self.calls(part, tools), None
        before = self.calls(part[:i], tools)
        name, sep, body = part[i + len("<function="):].partition(">")
        if not sep:
            return before, None
        end = body.rfind("</parameter>")
        whole = body[:end + len("</parameter>")] if end >= 0 else ""
        (call,) = self.calls(f"<function={name}>{whole}</function>", tools) or \
            (ToolCall(name.strip(), "{}"),)
        return before, ToolCall(call.name, call.arguments[:-1])

    def call_rule(self, name, parameters):
        properties = parameters.get("properties", {})
        required = set(parameters.get("required", ()))
        items = []
        for key, schema in properties.items():
            # One line of raw text (llguidance's lexer is greedy: a newline inside the
            # value would take the "\n" of the "\n</parameter>" that closes it).
            value = r'/[^<\n]*/' if schema.get("type") == "string" else lark_json(schema)
            item = f'"<parameter={key}>\\n" {value} "\\n</parameter>\\n"'
            items.append(item if key in required else f"({item})?")
        return (f'"<tool_call>\\n<function={name}>\\n" {" ".join(items)} '
                f'"</function>\\n</tool_call>\\n"')


class Llama3JsonParser(ToolParser):
    name, start = "llama3_json", "<|python_tag|>"
    example = '{"name": <function-name>, "parameters": <args-json-object>}'

    def split(self, text):
        stripped = text.lstrip()
        if stripped.startswith(self.start) or stripped.startswith("{"):
            return "", stripped
        return text, None

    def held(self, text):
        # Only a reply that opens with a call is one: hold it while it may still.
        stripped = text.lstrip()
        return len(text) if self.start.startswith(stripped) else 0

    def calls(self, part, tools):
        rest, calls = part[len(self.start):] if part.startswith(self.start) else part, []
        while rest.strip():
            value, rest = _json_prefix(rest.strip())
            call = _call(value.get("name"), value.get("parameters", value.get("arguments"))) \
                if isinstance(value, dict) else None
            if call is None:
                return []
            calls.append(call)
            rest = rest.strip()
            rest = rest[1:] if rest.startswith(";") else rest
        return calls

    def before(self, text):
        return text.rstrip().rstrip(";")

    def opens_call(self, part):
        # A reply of JSON is a call only once it begins {"name".
        stripped = re.sub(r"\s+", "", part)
        head = '{"name"'
        return stripped.startswith((self.start, head)) or head.startswith(stripped)

    def grammar(self, tools, parallel):
        one = _alternatives([self.call_rule(n, p) for n, p in tools.items()])
        return f'start: {one} ("; " {one})*' if parallel else f"start: {one}"

    def call_rule(self, name, parameters):
        return lark_json(_call_schema(name, parameters, "parameters"))


class MistralParser(ToolParser):
    name, start = "mistral", "[TOOL_CALLS]"
    example = '[TOOL_CALLS][{"name": <function-name>, "arguments": <args-json-object>}]'

    def calls(self, part, tools):
        calls = []
        for body in part.split(self.start)[1:]:
            body = body.strip()
            if body.startswith("["):   # [{"name": ..., "arguments": ...}, ...]
                value, _ = _json_prefix(body)
                items = value if isinstance(value, list) else [None]
            else:                      # NAME[ARGS]{...}
                name, _, args = body.partition("[ARGS]")
                value, _ = _json_prefix(args)
                items = [{"name": name.strip(), "arguments": value}]
            for item in items:
                call = _call(item.get("name"), item.get("arguments")) \
                    if isinstance(item, dict) else None
                if call is None:
                    return []
                calls.append(call)
        return calls

    def before(self, text):
        # [TOOL_CALLS][{...}, {cut  ->  [TOOL_CALLS][{...}]
        return text.rstrip().rstrip(",") + "]"

    def grammar(self, tools, parallel):
        one = _alternatives([self.call_rule(n, p) for n, p in tools.items()])
        more = f'(", " {one})*' if parallel else ""
        return f'start: "[TOOL_CALLS][" {one} {more} "]"'

    def call_rule(self, name, parameters):
        return lark_json(_call_schema(name, parameters, "arguments"))


PARSERS = {p.name: p for p in (HermesParser(), Qwen3CoderParser(), Llama3JsonParser(),
                               MistralParser())}


def parser_for(template: Optional[str]) -> ToolParser:
    """The parser whose syntax the chat template ``template`` teaches (hermes when it
    teaches none)."""
    text = template or ""
    if "<function=" in text and "<parameter=" in text:
        return PARSERS["qwen3_coder"]
    if "[TOOL_CALLS]" in text:
        return PARSERS["mistral"]
    if "<|python_tag|>" in text or ("<|start_header_id|>" in text and "parameters" in text):
        return PARSERS["llama3_json"]
    return PARSERS["hermes"]


def template_knows_tools(template: Optional[str]) -> bool:
    """Whether the chat template renders a ``tools`` list (else the server describes
    the tools in a system message)."""
    return bool(template) and re.search(r"\btools\b", template) is not None


def tools_system_prompt(tools: Sequence[dict], parser: ToolParser) -> str:
    """The system text that describes ``tools`` (OpenAI tool objects) to a model whose
    template does not, in the ``parser``'s syntax (the Hermes prompt's wording)."""
    listed = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return ("You may call one or more functions to assist with the user query. The "
            f"functions are:\n<tools>\n{listed}\n</tools>\nTo call a function, reply with:\n"
            f"{parser.example}")
