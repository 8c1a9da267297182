"""The objects of OpenAI's Responses API that the server returns: the ``response``
object and, streamed, its server-sent events (``response.created``,
``response.in_progress``, ``response.output_item.added`` / ``.done``,
``response.content_part.added`` / ``.done``, ``response.output_text.delta`` / ``.done``,
``response.reasoning_text.delta`` / ``.done``, ``response.function_call_arguments.delta``
/ ``.done``, then ``response.completed``, ``response.incomplete`` (the token limit) or
``response.failed``), each with its ``sequence_number``.

A chat reply's deltas (``ChatOutput``: reasoning_content, content, tool_calls) become
output items in order — ``reasoning``, ``message`` with one ``output_text`` part,
``function_call`` — through one builder for both forms, so a stream's events rebuild
exactly the non-streamed response.
"""
from __future__ import annotations

import json
import time
import uuid
from typing import List, Optional

from .chat_output import ChatOutput
from .engine_loop import Event
from .sse import typed


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class _Items:
    """Output items built from deltas; ``events`` collects what a stream sends."""

    def __init__(self):
        self.output: List[dict] = []
        self.events: List[dict] = []
        self.open: Optional[dict] = None   # the item deltas are still added to

    def emit(self, type_: str, **fields) -> None:
        self.events.append({"type": type_, **fields})

    def _where(self) -> dict:
        return {"item_id": self.open["id"], "output_index": len(self.output) - 1}

    def _start(self, item: dict, part: Optional[dict] = None) -> None:
        self.close("completed")
        self.output.append(item)
        self.open = item
        self.emit("response.output_item.added", output_index=len(self.output) - 1,
                  item=json.loads(json.dumps(item)))
        if part is not None:
            item["content"].append(part)
            self.emit("response.content_part.added", **self._where(), content_index=0,
                      part=dict(part))

    def add(self, delta: dict) -> None:
        """One ChatOutput delta."""
        if delta.get("reasoning_content"):
            if not self.open or self.open["type"] != "reasoning":
                self._start({"id": _id("rs"), "type": "reasoning", "summary": [],
                             "content": [], "status": "in_progress"},
                            {"type": "reasoning_text", "text": ""})
            self._text("response.reasoning_text.delta", delta["reasoning_content"])
        if delta.get("content"):
            if not self.open or self.open["type"] != "message":
                self._start({"id": _id("msg"), "type": "message", "role": "assistant",
                             "status": "in_progress", "content": []},
                            {"type": "output_text", "text": "", "annotations": [],
                             "logprobs": []})
            self._text("response.output_text.delta", delta["content"], logprobs=[])
        for piece in delta.get("tool_calls", ()):
            if "id" in piece:   # a new call: its name, then its arguments
                self._start({"id": _id("fc"), "type": "function_call", "status": "in_progress",
                             "call_id": piece["id"], "name": piece["function"]["name"],
                             "arguments": ""})
            if piece["function"]["arguments"]:
                self.open["arguments"] += piece["function"]["arguments"]
                self.emit("response.function_call_arguments.delta", **self._where(),
                          delta=piece["function"]["arguments"])

    def _text(self, kind: str, text: str, **extra) -> None:
        self.open["content"][0]["text"] += text
        self.emit(kind, **self._where(), content_index=0, delta=text, **extra)

    def close(self, status: str) -> None:
        """Ends the open item (``status``: completed or incomplete)."""
        item, self.open = self.open, None
        if item is None:
            return
        where = {"item_id": item["id"], "output_index": len(self.output) - 1}
        if item["type"] == "function_call":
            self.emit("response.function_call_arguments.done", **where,
                      name=item["name"], arguments=item["arguments"])
        else:
            part = item["content"][0]
            if item["type"] == "message":
                self.emit("response.output_text.done", **where, content_index=0,
                          text=part["text"], logprobs=[])
            else:
                self.emit("response.reasoning_text.done", **where, content_index=0,
                          text=part["text"])
            self.emit("response.content_part.done", **where, content_index=0, part=dict(part))
        item["status"] = status
        self.emit("response.output_item.done", output_index=where["output_index"],
                  item=json.loads(json.dumps(item)))


class ResponsesReply:
    """Builds one request's ``response`` object and stream events. ``request``: the
    request's fields echoed in the response (tools, tool_choice, text...); ``split``:
    the chat reply splitter; ``count_tokens(text)``: the tokens of a text, for
    ``usage.output_tokens_details.reasoning_tokens``."""

    def __init__(self, request: dict, model: str, split: ChatOutput, count_tokens):
        self.split, self.count_tokens = split, count_tokens
        self.items = _Items()
        self.sequence = 0
        self.base = {
            "id": _id("resp"), "object": "response", "created_at": int(time.time()),
            "status": "in_progress", "error": None, "incomplete_details": None,
            "instructions": request.get("instructions"),
            "max_output_tokens": request.get("max_output_tokens"), "model": model,
            "output": [], "parallel_tool_calls": request.get("parallel_tool_calls", True),
            "previous_response_id": None, "reasoning": request.get("reasoning")
            or {"effort": None, "summary": None}, "store": False,
            "temperature": request.get("temperature", 1.0),
            "text": request.get("text") or {"format": {"type": "text"}},
            "tool_choice": request.get("tool_choice", "auto"),
            "tools": request.get("tools", []), "top_p": request.get("top_p", 1.0),
            "truncation": "disabled", "usage": None}

    def _feed(self, text: str, last: Optional[Event]) -> None:
        cut = last is not None and last.finish_reason == "length"
        for delta in self.split.feed(text) + (self.split.finish(cut) if last else []):
            self.items.add(delta)

    def _final(self, last: Event) -> dict:
        incomplete = last.finish_reason == "length"
        self.items.close("incomplete" if incomplete else "completed")
        reasoning = "".join(i["content"][0]["text"] for i in self.items.output
                            if i["type"] == "reasoning")
        return {**self.base, "status": "incomplete" if incomplete else "completed",
                "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
                "output": self.items.output, "usage": {
                    "input_tokens": last.prompt_tokens,
                    "input_tokens_details": {"cached_tokens": last.cached_tokens},
                    "output_tokens": last.completion_tokens,
                    "output_tokens_details": {
                        "reasoning_tokens": self.count_tokens(reasoning) if reasoning else 0},
                    "total_tokens": last.prompt_tokens + last.completion_tokens}}

    def full(self, events: List[Event]) -> dict:
        """The non-streamed response to a request whose events are ``events``."""
        self._feed("".join(e.text for e in events), events[-1])
        return self._final(events[-1])

    def _drain(self) -> List[str]:
        out = []
        for event in self.items.events:
            out.append(typed({**event, "sequence_number": self.sequence}))
            self.sequence += 1
        self.items.events.clear()
        return out

    def stream_start(self) -> List[str]:
        for kind in ("response.created", "response.in_progress"):
            self.items.emit(kind, response=dict(self.base))
        return self._drain()

    def stream_event(self, event: Event) -> List[str]:
        self._feed(event.text, event if event.finish_reason else None)
        if event.finish_reason:
            final = self._final(event)
            self.items.emit("response.incomplete" if final["status"] == "incomplete"
                            else "response.completed", response=final)
        return self._drain()

    def stream_error(self, message: str) -> List[str]:
        self.items.close("incomplete")
        self.items.emit("response.failed", response={
            **self.base, "status": "failed", "output": self.items.output,
            "error": {"code": "server_error", "message": message}})
        return self._drain()

    def stream_end(self) -> List[str]:
        return []   # the terminal event ends a Responses stream (no [DONE])
