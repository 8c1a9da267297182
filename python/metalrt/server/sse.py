"""The text of one server-sent event of a streamed reply.

The reply objects that ``app.answer`` streams (openai_format.Response,
responses_format.ResponsesReply, anthropic_format.MessagesResponse) share one protocol:
``full(events)`` is the non-streamed JSON; ``stream_start()``, ``stream_event(event)``,
``stream_error(message)`` and ``stream_end()`` return the stream's events as text, made
here.
"""
from __future__ import annotations

import json


def data(obj: dict) -> str:
    """A ``data:`` line only, as chat and text completion streams send."""
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def typed(obj: dict) -> str:
    """An ``event:`` line naming ``obj["type"]``, then its ``data:`` (the Responses and
    Messages streams)."""
    return f"event: {obj['type']}\n{data(obj)}"
