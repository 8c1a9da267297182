"""One HTTP request run through an ASGI application in-process, its response yielded as
it is produced: how a Ray Serve replica serves the metalrt application without a socket
of its own (``ray_app.EngineReplica``)."""
from __future__ import annotations

import asyncio
from typing import AsyncIterator, List, Tuple, Union


async def asgi_stream(app, method: str, path: str, query: str,
                      headers: List[Tuple[str, str]], body: bytes
                      ) -> AsyncIterator[Union[dict, bytes]]:
    """Runs ``app`` (an ASGI 3 callable whose lifespan has started) on one request and
    yields ``{"status": int, "headers": [(name, value), ...]}`` once, then the body's
    chunks (``bytes``) as the application sends them (a streamed reply arrives event by
    event). Closing the generator early tells the application the client is gone
    (``http.disconnect``), which stops a streamed generation. Exceptions of the
    application propagate."""
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1", "method": method.upper(), "scheme": "http",
        "path": path, "raw_path": path.encode("utf-8"), "root_path": "",
        "query_string": query.encode("latin-1"),
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
        "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 0),
    }
    messages: asyncio.Queue = asyncio.Queue()
    gone = asyncio.Event()
    request_sent = False

    async def receive() -> dict:
        nonlocal request_sent
        if not request_sent:
            request_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        await messages.put(message)

    task = asyncio.ensure_future(app(scope, receive, send))
    task.add_done_callback(lambda _: messages.put_nowait(None))
    try:
        while True:
            message = await messages.get()
            if message is None:
                break
            if message["type"] == "http.response.start":
                yield {"status": message["status"],
                       "headers": [(k.decode("latin-1"), v.decode("latin-1"))
                                   for k, v in message.get("headers", [])]}
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    yield bytes(message["body"])
                if not message.get("more_body", False):
                    break
        await task
    finally:
        gone.set()
        if not task.done():
            try:
                await asyncio.wait_for(task, timeout=10)
            except (asyncio.TimeoutError, Exception):
                task.cancel()
