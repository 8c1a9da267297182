"""The JSON objects of OpenAI's API reference that the server returns: chat completions
and their chunks, text completions, usage, logprobs and the error shape."""
from __future__ import annotations

import time
import uuid
from typing import List, Optional

from .chat_output import ChatOutput, message
from .engine_loop import Event
from .sse import data as sse


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def error_body(message: str, type_: str, param: Optional[str] = None,
               code: Optional[str] = None) -> dict:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def usage(last: Event) -> dict:
    return {"prompt_tokens": last.prompt_tokens, "completion_tokens": last.completion_tokens,
            "total_tokens": last.prompt_tokens + last.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": last.cached_tokens}}


def _entry(token: str, logprob: float) -> dict:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def chat_logprobs(events: List[Event]) -> Optional[dict]:
    """``choices[].logprobs`` of a chat completion: one entry per sampled token with
    its ``top_logprobs``; None when logprobs were not asked for."""
    entries = [e.logprobs for e in events if e.logprobs]
    if not entries:
        return None
    return {"content": [{**_entry(x["text"], x["logprob"]),
                         "top_logprobs": [_entry(t, lp) for t, lp in x["top"]]}
                        for x in entries]}


def completion_logprobs(events: List[Event], offset: int) -> Optional[dict]:
    """The legacy Completions ``logprobs`` object: tokens, token_logprobs,
    top_logprobs (one {token: logprob} per token) and text_offset (characters from
    the start of the completion text, ``offset`` for the first of ``events``)."""
    entries = [e.logprobs for e in events if e.logprobs]
    if not entries:
        return None
    offsets = []
    for x in entries:
        offsets.append(offset)
        offset += len(x["text"])
    return {"tokens": [x["text"] for x in entries],
            "token_logprobs": [x["logprob"] for x in entries],
            "top_logprobs": [dict(x["top"]) for x in entries], "text_offset": offsets}


class Response:
    """Builds one request's objects: ``chat`` selects chat.completion(.chunk) over
    text_completion; ``model`` is the served model id; ``split`` turns a chat reply's
    text into its message fields (plain content when None); ``include_usage``: a
    stream ends with a usage chunk.

    ``full`` and the ``stream_*`` methods are the reply protocol of ``sse.py``."""

    def __init__(self, chat: bool, model: str, split: Optional[ChatOutput] = None,
                 include_usage: bool = False):
        self.chat, self.model, self.include_usage = chat, model, include_usage
        self.split = split or ChatOutput(None, {}, False)
        self.called = False   # a tool call was streamed
        self.id = new_id("chatcmpl" if chat else "cmpl")
        self.created = int(time.time())
        self.text_offset = 0

    def _object(self, kind: str, choices: list, usage_: Optional[dict]) -> dict:
        body = {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "choices": choices}
        if usage_ is not None or kind.endswith("chunk"):
            body["usage"] = usage_
        return body

    def full(self, events: List[Event]) -> dict:
        """The non-streamed response to a request whose events are ``events``."""
        text, last = "".join(e.text for e in events), events[-1]
        if self.chat:
            reply = message(self.split.feed(text) + self.split.finish())
            reason = "tool_calls" if reply.get("tool_calls") else last.finish_reason
            choice = {"index": 0, "message": reply, "logprobs": chat_logprobs(events),
                      "finish_reason": reason}
            return self._object("chat.completion", [choice], usage(last))
        choice = {"index": 0, "text": text, "logprobs": completion_logprobs(events, 0),
                  "finish_reason": last.finish_reason}
        return self._object("text_completion", [choice], usage(last))

    def first_chunk(self) -> Optional[dict]:
        """The chunk that opens a chat stream (the assistant role), None for text."""
        if not self.chat:
            return None
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""},
                  "logprobs": None, "finish_reason": None}
        return self._object("chat.completion.chunk", [choice], None)

    def chunks(self, event: Event) -> List[dict]:
        """The streamed chunks of one event: a chat chunk per delta of the reply
        (content, reasoning_content or tool_calls; the event's logprobs on the first),
        the finish reason on the last; one text_completion chunk."""
        if self.chat:
            deltas = self.split.feed(event.text)
            if event.finish_reason:
                deltas += self.split.finish()
            self.called = self.called or any("tool_calls" in d for d in deltas)
            if not deltas and (event.logprobs or event.finish_reason):
                deltas = [{}]
            out = []
            for i, delta in enumerate(deltas):
                last = i == len(deltas) - 1
                reason = ("tool_calls" if self.called else event.finish_reason) \
                    if last and event.finish_reason else None
                choice = {"index": 0, "delta": delta,
                          "logprobs": chat_logprobs([event]) if i == 0 else None,
                          "finish_reason": reason}
                out.append(self._object("chat.completion.chunk", [choice], None))
            return out
        choice = {"index": 0, "text": event.text,
                  "logprobs": completion_logprobs([event], self.text_offset),
                  "finish_reason": event.finish_reason}
        self.text_offset += len(event.text)
        return [self._object("text_completion", [choice], None)]

    def usage_chunk(self, last: Event) -> dict:
        """The last chunk of a stream with ``stream_options.include_usage``: no
        choices, the request's usage."""
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return self._object(kind, [], usage(last))

    def stream_start(self) -> List[str]:
        first = self.first_chunk()
        return [sse(first)] if first else []

    def stream_event(self, event: Event) -> List[str]:
        out = []
        if event.text or event.logprobs or event.finish_reason:
            out += [sse(chunk) for chunk in self.chunks(event)]
        if event.finish_reason and self.include_usage:
            out.append(sse(self.usage_chunk(event)))
        return out

    @staticmethod
    def stream_error(message: str) -> List[str]:
        return [sse(error_body(message, "server_error"))]

    @staticmethod
    def stream_end() -> List[str]:
        return ["data: [DONE]\n\n"]
