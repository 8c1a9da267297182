"""The JSON objects of Anthropic's Messages API that the server returns: the message,
its stream events and the error shape.

A reply is split by the same ChatOutput as a chat completion (reasoning, content, tool
calls); its deltas become content blocks here: ``thinking``, ``text`` and ``tool_use``.
The non-streamed message is built from the same blocks as the stream's events, so a
stream reassembles into exactly the non-streamed message.
"""
from __future__ import annotations

import json
import uuid
from typing import List, Optional

from .chat_output import ChatOutput
from .engine_loop import Event
from .sse import typed

# Anthropic's error type for each status it documents; other 4xx are invalid requests.
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 500: "api_error", 503: "overloaded_error",
                529: "overloaded_error"}


def error_body(status: int, message: str) -> dict:
    """``{"type": "error", "error": {"type", "message"}}``, the type by ``status``."""
    kind = _ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _usage(last: Event) -> dict:
    # Anthropic's input total is input_tokens + cache_read_input_tokens: the prompt
    # tokens the prefix cache held are counted as read from the cache.
    return {"input_tokens": last.prompt_tokens - last.cached_tokens,
            "cache_read_input_tokens": last.cached_tokens,
            "output_tokens": last.completion_tokens}


class _Blocks:
    """Content blocks from ChatOutput deltas: ``add(delta)`` returns the stream events
    it makes (a block's start, its delta, the previous block's stop) and keeps
    ``content``, the blocks so far."""

    def __init__(self):
        self.content: List[dict] = []
        self.open = False
        self.arguments = ""   # of the open tool_use block

    def _start(self, block: dict) -> List[dict]:
        events = self.close()
        self.content.append(block)
        self.open = True
        return events + [{"type": "content_block_start", "index": len(self.content) - 1,
                          "content_block": dict(block)}]   # a copy: blocks start empty

    def _delta(self, delta: dict) -> dict:
        return {"type": "content_block_delta", "index": len(self.content) - 1, "delta": delta}

    def close(self) -> List[dict]:
        if not self.open:
            return []
        self.open = False
        block = self.content[-1]
        if block["type"] == "tool_use":
            try:
                block["input"] = json.loads(self.arguments or "{}")
            except ValueError:   # a call cut by max_tokens: its input_json_deltas hold it
                block["input"] = {}
            self.arguments = ""
        return [{"type": "content_block_stop", "index": len(self.content) - 1}]

    def add(self, delta: dict) -> List[dict]:
        events: List[dict] = []
        current = self.content[-1]["type"] if self.open else None
        if delta.get("reasoning_content"):
            text = delta["reasoning_content"]
            if current != "thinking":
                events += self._start({"type": "thinking", "thinking": "", "signature": ""})
            self.content[-1]["thinking"] += text
            events.append(self._delta({"type": "thinking_delta", "thinking": text}))
        if delta.get("content"):
            text = delta["content"]
            if current != "text":
                events += self._start({"type": "text", "text": ""})
            self.content[-1]["text"] += text
            events.append(self._delta({"type": "text_delta", "text": text}))
        for piece in delta.get("tool_calls", ()):
            if "id" in piece:   # a new call: its name first, as ChatOutput emits it
                events += self._start({"type": "tool_use", "id": piece["id"],
                                       "name": piece["function"]["name"], "input": {}})
            fragment = piece["function"]["arguments"]
            if fragment:
                self.arguments += fragment
                events.append(self._delta({"type": "input_json_delta",
                                           "partial_json": fragment}))
        return events


class MessagesResponse:
    """Builds one request's message (``full``) or stream events (the ``stream_*``
    methods, the reply protocol of ``sse.py``): ``model`` is the served model id,
    ``split`` turns the reply's text into its parts, ``prompt_tokens`` is the prompt's
    length (the stream's first usage, before the prefix cache is known)."""

    def __init__(self, model: str, split: ChatOutput, prompt_tokens: int):
        self.model, self.split, self.prompt_tokens = model, split, prompt_tokens
        self.id = f"msg_{uuid.uuid4().hex[:24]}"
        self.blocks = _Blocks()

    def _stop(self, last: Event) -> dict:
        if last.finish_reason == "length":   # a tool_use cut by max_tokens too
            reason = "max_tokens"
        elif any(b["type"] == "tool_use" for b in self.blocks.content):
            reason = "tool_use"
        else:
            reason = "stop_sequence" if last.stop_sequence is not None else "end_turn"
        return {"stop_reason": reason,
                "stop_sequence": last.stop_sequence if reason == "stop_sequence" else None}

    def _message(self, content: list, usage: dict, stop: dict) -> dict:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": content, **stop, "usage": usage}

    def full(self, events: List[Event]) -> dict:
        """The non-streamed message of a request whose events are ``events``."""
        cut = events[-1].finish_reason == "length"
        for delta in self.split.feed("".join(e.text for e in events)) + self.split.finish(cut):
            self.blocks.add(delta)
        self.blocks.close()
        return self._message(self.blocks.content, _usage(events[-1]), self._stop(events[-1]))

    def stream_start(self) -> List[str]:
        """``message_start`` (no content, no stop reason yet) and a ``ping``."""
        start = self._message([], {"input_tokens": self.prompt_tokens, "output_tokens": 0},
                              {"stop_reason": None, "stop_sequence": None})
        return [typed({"type": "message_start", "message": start}), typed({"type": "ping"})]

    def stream_event(self, event: Event) -> List[str]:
        """The content block events of one engine event; after the last, the last
        block's stop, ``message_delta`` (stop reason, usage) and ``message_stop``."""
        deltas = self.split.feed(event.text)
        if event.finish_reason:
            deltas += self.split.finish(event.finish_reason == "length")
        events = [e for d in deltas for e in self.blocks.add(d)]
        if event.finish_reason:
            events += self.blocks.close() + [
                {"type": "message_delta", "delta": self._stop(event), "usage": _usage(event)},
                {"type": "message_stop"}]
        return [typed(e) for e in events]

    @staticmethod
    def stream_error(message: str) -> List[str]:
        return [typed(error_body(500, message))]

    @staticmethod
    def stream_end() -> List[str]:
        return []   # message_stop ends an Anthropic stream (no sentinel)
