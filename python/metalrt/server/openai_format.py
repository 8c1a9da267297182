"""The JSON objects of OpenAI's API reference that the server returns: chat completions
and their chunks, text completions, usage, logprobs and the error shape."""
from __future__ import annotations

import copy
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


def usage(lasts: List[Event]) -> dict:
    """The usage of a request whose choices ended with ``lasts``: the prompt counted
    once (its cached tokens as the first choice found them), every choice's tokens."""
    prompt, completion = lasts[0].prompt_tokens, sum(e.completion_tokens for e in lasts)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": lasts[0].cached_tokens}}


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


def _top(entry: dict) -> dict:
    """The legacy {token: logprob} of one position: the top entries and, as OpenAI's
    legacy API does, the sampled token when it is not among them (k + 1 at most)."""
    return {**dict(entry["top"]), entry["text"]: entry["logprob"]}


def completion_logprobs(events: List[Event], offset: int,
                        prompt: Optional[List[dict]] = None) -> Optional[dict]:
    """The legacy Completions ``logprobs`` object: tokens, token_logprobs,
    top_logprobs (one {token: logprob} per token) and text_offset (characters from
    the start of the choice's text, ``offset`` for the first token). ``prompt``: the
    echoed prompt's entries (``Event.prompt_logprobs``) come first, the first token's
    token_logprobs and top_logprobs null."""
    entries = [e.logprobs for e in events if e.logprobs]
    if not entries and not prompt:
        return None
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for i, x in enumerate(prompt or ()):   # nothing predicts the first prompt token
        out["tokens"].append(x["text"])
        out["token_logprobs"].append(None if i == 0 else x["logprob"])
        out["top_logprobs"].append(None if i == 0 else _top(x))
        out["text_offset"].append(offset)
        offset += len(x["text"])
    for x in entries:
        out["tokens"].append(x["text"])
        out["token_logprobs"].append(x["logprob"])
        out["top_logprobs"].append(_top(x))
        out["text_offset"].append(offset)
        offset += len(x["text"])
    return out


class Response:
    """Builds one request's objects: ``chat`` selects chat.completion(.chunk) over
    text_completion; ``model`` is the served model id; ``split`` turns a chat reply's
    text into its message fields (plain content when None); ``include_usage``: a
    stream ends with a usage chunk; ``n`` choices (events carry their ``index``);
    ``echo``: a text completion's prompt, put before each choice's text (with its
    tokens' logprobs when the events bring ``prompt_logprobs``: ``echo_logprobs``).

    ``full`` and the ``stream_*`` methods are the reply protocol of ``sse.py``."""

    def __init__(self, chat: bool, model: str, split: Optional[ChatOutput] = None,
                 include_usage: bool = False, n: int = 1, echo: Optional[str] = None,
                 echo_logprobs: bool = False):
        self.chat, self.model, self.include_usage, self.n = chat, model, include_usage, n
        first = split or ChatOutput(None, {}, False)
        # A splitter follows one text: each choice gets its own, made before any feed.
        self.splits = [first] + [copy.deepcopy(first) for _ in range(n - 1)]
        self.echo, self.echo_logprobs = echo, echo_logprobs
        self.called = [False] * n   # a tool call was streamed, per choice
        self.id = new_id("chatcmpl" if chat else "cmpl")
        self.created = int(time.time())
        self.text_offset = [len(echo or "")] * n
        self.lasts: dict = {}       # index -> the choice's last event (streamed)

    def _object(self, kind: str, choices: list, usage_: Optional[dict]) -> dict:
        body = {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "choices": choices}
        if usage_ is not None or kind.endswith("chunk"):
            body["usage"] = usage_
        return body

    def full(self, events: List[Event]) -> dict:
        """The non-streamed response to a request whose events are ``events`` (every
        choice's, in any order)."""
        prompt = next((e.prompt_logprobs for e in events if e.prompt_logprobs), None)
        per = [[e for e in events if e.index == i and e.prompt_logprobs is None]
               for i in range(self.n)]
        choices = []
        for i, mine in enumerate(per):
            text, last = "".join(e.text for e in mine), mine[-1]
            if self.chat:
                cut = last.finish_reason == "length"
                reply = message(self.splits[i].feed(text) + self.splits[i].finish(cut))
                # A call cut by max_tokens ends with "length", as OpenAI's does.
                reason = "tool_calls" if reply.get("tool_calls") and not cut \
                    else last.finish_reason
                choices.append({"index": i, "message": reply, "logprobs": chat_logprobs(mine),
                                "finish_reason": reason})
            else:
                choices.append({"index": i, "text": (self.echo or "") + text,
                                "logprobs": completion_logprobs(mine, 0, prompt),
                                "finish_reason": last.finish_reason})
        kind = "chat.completion" if self.chat else "text_completion"
        return self._object(kind, choices, usage([p[-1] for p in per]))

    def first_chunks(self) -> List[dict]:
        """The chunks that open a stream: each chat choice's assistant role; each echoing
        text choice's prompt unless its logprobs are still to come."""
        if self.chat:
            return [self._object("chat.completion.chunk", [
                {"index": i, "delta": {"role": "assistant", "content": ""},
                 "logprobs": None, "finish_reason": None}], None) for i in range(self.n)]
        if self.echo is None or self.echo_logprobs:
            return []
        return self._echo_chunks(None)

    def _echo_chunks(self, prompt: Optional[List[dict]]) -> List[dict]:
        return [self._object("text_completion", [
            {"index": i, "text": self.echo,
             "logprobs": completion_logprobs([], 0, prompt) if prompt else None,
             "finish_reason": None}], None) for i in range(self.n)]

    def chunks(self, event: Event) -> List[dict]:
        """The streamed chunks of one event: a chat chunk per delta of the reply
        (content, reasoning_content or tool_calls; the event's logprobs on the first),
        the finish reason on the last; one text_completion chunk (the echoed prompt of
        each choice for the event with ``prompt_logprobs``)."""
        i = event.index
        if event.prompt_logprobs is not None:
            return self._echo_chunks(event.prompt_logprobs) if self.echo is not None else []
        if self.chat:
            deltas = self.splits[i].feed(event.text)
            if event.finish_reason:
                deltas += self.splits[i].finish(event.finish_reason == "length")
            self.called[i] = self.called[i] or any("tool_calls" in d for d in deltas)
            if not deltas and (event.logprobs or event.finish_reason):
                deltas = [{}]
            out = []
            for j, delta in enumerate(deltas):
                last = j == len(deltas) - 1
                reason = ("tool_calls" if self.called[i] and event.finish_reason != "length"
                          else event.finish_reason) if last and event.finish_reason else None
                choice = {"index": i, "delta": delta,
                          "logprobs": chat_logprobs([event]) if j == 0 else None,
                          "finish_reason": reason}
                out.append(self._object("chat.completion.chunk", [choice], None))
            return out
        choice = {"index": i, "text": event.text,
                  "logprobs": completion_logprobs([event], self.text_offset[i]),
                  "finish_reason": event.finish_reason}
        self.text_offset[i] += len(event.text)
        return [self._object("text_completion", [choice], None)]

    def usage_chunk(self, lasts: List[Event]) -> dict:
        """The last chunk of a stream with ``stream_options.include_usage``: no
        choices, the request's usage."""
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return self._object(kind, [], usage(lasts))

    def stream_start(self) -> List[str]:
        return [sse(chunk) for chunk in self.first_chunks()]

    def stream_event(self, event: Event) -> List[str]:
        out = []
        if event.text or event.logprobs or event.finish_reason or event.prompt_logprobs:
            out += [sse(chunk) for chunk in self.chunks(event)]
        if event.finish_reason:
            self.lasts[event.index] = event
            if self.include_usage and len(self.lasts) == self.n:
                out.append(sse(self.usage_chunk([self.lasts[i] for i in range(self.n)])))
        return out

    @staticmethod
    def stream_error(message: str) -> List[str]:
        return [sse(error_body(message, "server_error"))]

    @staticmethod
    def stream_end() -> List[str]:
        return ["data: [DONE]\n\n"]
