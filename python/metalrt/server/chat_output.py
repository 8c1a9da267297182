"""A chat reply's text, as it streams, split into OpenAI's message fields:
``reasoning_content`` (the ``<think>...</think>`` part of reasoning models, DeepSeek-R1
style), ``content``, and ``tool_calls`` (parsed by the model's ToolParser).

The non-streamed message is built by the same splitter from the whole text, so a
stream's deltas reassemble into exactly the non-streamed message. Text that could
still be the beginning of a marker (``</think>``, ``<tool_call>``...) is held back
until the next piece decides it, as stop strings are.
"""
from __future__ import annotations

from typing import Dict, List, Optional

from .tool_parsers import ToolCall, ToolParser, held_prefix

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


class ChatOutput:
    """``feed(text)`` and ``finish()`` return the deltas the text adds: dicts with
    ``reasoning_content``, ``content`` or ``tool_calls`` (OpenAI's streamed form:
    index, id, type, function name and arguments). ``parser``: the tool-call syntax
    (None: no tools in the request); ``tools``: function name -> parameters schema;
    ``reasoning``: split ``<think>`` off; ``thinking``: the prompt already opened it."""

    def __init__(self, parser: Optional[ToolParser], tools: Dict[str, dict],
                 reasoning: bool, thinking: bool = False):
        self.parser, self.tools = parser, tools
        self.phase = ("reasoning" if thinking else "opening") if reasoning else "content"
        self.text = ""          # the current phase's text so far
        self.sent = 0           # of which this many characters were emitted
        self.calls: List[ToolCall] = []
        self.trim = reasoning   # newlines after <think> and </think> are layout, dropped

    def feed(self, piece: str) -> List[dict]:
        self.text += piece
        deltas: List[dict] = []
        while True:
            phase = self.phase
            if self.trim and phase in ("reasoning", "content"):
                self.text = self.text.lstrip("\n")
                if not self.text:
                    return [d for d in deltas if any(d.values())]
                self.trim = False
            deltas += getattr(self, f"_{phase}")()
            if self.phase == phase:
                return [d for d in deltas if any(d.values())]

    def finish(self, cut: bool = False) -> List[dict]:
        """The deltas of the held-back text once the reply is complete; ``cut``: it
        ended at max_tokens, and a call it was writing is a call (its arguments the
        JSON text so far, as OpenAI returns one), never content."""
        deltas = self.feed("")
        rest = self.text[self.sent:]
        if self.phase == "tools":
            if cut:
                whole, partial = self.parser.cut(self.text, self.tools)
                calls = whole + [partial] if partial else whole
                keep = calls or self.parser.opens_call(self.text)
            else:
                calls = self.parser.calls(self.text, self.tools)
                keep = calls or self.calls
            if keep:
                deltas += self._new_calls(calls)
            else:   # text in the call syntax that does not parse stays content
                deltas.append({"content": self.text})
        elif rest:
            deltas.append({"reasoning_content" if self.phase == "reasoning" else "content": rest})
        self.text, self.sent = "", 0
        return [d for d in deltas if any(d.values())]

    def _move(self, phase: str, rest: str, trim: bool = False) -> None:
        self.phase, self.text, self.sent, self.trim = phase, rest, 0, trim

    def _opening(self) -> List[dict]:
        stripped = self.text.lstrip()
        if stripped.startswith(THINK_OPEN):
            self._move("reasoning", stripped[len(THINK_OPEN):], trim=True)
        elif not THINK_OPEN.startswith(stripped):   # not a <think> reply
            self._move("content", self.text)
        return []

    def _reasoning(self) -> List[dict]:
        end = self.text.find(THINK_CLOSE)
        if end >= 0:
            delta = {"reasoning_content": self.text[self.sent:end]}
            self._move("content", self.text[end + len(THINK_CLOSE):], trim=True)
            return [delta]
        safe = len(self.text) - held_prefix(self.text, THINK_CLOSE)
        delta = {"reasoning_content": self.text[self.sent:safe]}
        self.sent = max(self.sent, safe)
        return [delta]

    def _content(self) -> List[dict]:
        if self.parser is None:
            delta, self.sent = {"content": self.text[self.sent:]}, len(self.text)
            return [delta]
        content, part = self.parser.split(self.text)
        if part is not None:
            delta = {"content": content[self.sent:]}
            self._move("tools", part)
            return [delta]
        safe = len(self.text) - self.parser.held(self.text)
        delta = {"content": self.text[self.sent:safe]}
        self.sent = max(self.sent, safe)
        return [delta]

    def _tools(self) -> List[dict]:
        # Calls are emitted as each one's closing marker arrives (formats without one:
        # at the end of the reply).
        end = self.parser.end and self.text.rfind(self.parser.end)
        if not end or end < 0:
            return []
        return self._new_calls(self.parser.calls(self.text[:end + len(self.parser.end)],
                                                 self.tools))

    def _new_calls(self, calls: List[ToolCall]) -> List[dict]:
        deltas = []
        for call in calls[len(self.calls):]:
            deltas += call_deltas(len(self.calls), call)
            self.calls.append(call)
        return deltas


def call_deltas(index: int, call: ToolCall) -> List[dict]:
    """The stream deltas of tool call ``index``: the name first, the arguments after it
    (the shape of OpenAI's stream, which the ``openai`` client's helpers reassemble)."""
    return [{"tool_calls": [{"index": index, "id": call.id, "type": "function",
                             "function": {"name": call.name, "arguments": ""}}]},
            {"tool_calls": [{"index": index, "function": {"arguments": call.arguments}}]}]


def message(deltas: List[dict]) -> dict:
    """The non-streamed assistant message of a reply's deltas."""
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content", "") for d in deltas)
    calls: List[dict] = []
    for d in deltas:
        for piece in d.get("tool_calls", ()):
            if "id" in piece:
                calls.append({"id": piece["id"], "type": "function",
                              "function": {"name": piece["function"]["name"], "arguments": ""}})
            calls[piece["index"]]["function"]["arguments"] += piece["function"]["arguments"]
    out = {"role": "assistant", "content": content if content or not calls else None}
    if reasoning:
        out["reasoning_content"] = reasoning
    if calls:
        out["tool_calls"] = calls
    return out
