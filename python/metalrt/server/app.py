"""The FastAPI application: OpenAI's ``/v1/chat/completions``, ``/v1/completions`` and
``/v1/models``, plus ``/health`` with the engine's counters.

Errors use OpenAI's shape and status codes: 400 ``invalid_request_error`` for a body
that does not validate (malformed JSON included) or a prompt the model cannot take,
404 ``model_not_found`` for another model id, 503 when the queue is full, 500 when a
forward step fails.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
from typing import List, Optional, Union

import jinja2
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException

from ..generation import prompt_ids
from ..runner import SamplingParams
from .engine_loop import EngineLoop, Event, QueueFullError
from .openai_format import Response, error_body
from .schemas import ChatCompletionRequest, CompletionRequest


DISCONNECT_POLL_SECONDS = 0.25   # how often a non-streamed request checks for its client


class APIError(Exception):
    """An error answered in OpenAI's shape with ``status``."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 param: Optional[str] = None, code: Optional[str] = None):
        super().__init__(message)
        self.status, self.body = status, error_body(message, type_, param, code)


def _validation_error(exc: RequestValidationError) -> APIError:
    first = exc.errors()[0]
    where = [str(p) for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid":
        return APIError(400, f"the request body is not valid JSON: {first.get('msg')}")
    param = ".".join(where) or None
    return APIError(400, f"{param or 'body'}: {first.get('msg')}", param=param)


def create_app(engine_loop: EngineLoop, model_id: str, default_max_tokens: int = 512) -> FastAPI:
    """The application serving ``engine_loop`` under the model id ``model_id``; a
    request without ``max_tokens`` generates at most ``default_max_tokens``. The engine
    loop is closed when the application shuts down."""
    @contextlib.asynccontextmanager
    async def lifespan(_):
        yield
        engine_loop.close()

    app = FastAPI(title="metalrt", docs_url=None, redoc_url=None, lifespan=lifespan)
    tokenizer = engine_loop.tokenizer

    @app.exception_handler(APIError)
    async def _api_error(_, exc: APIError):
        return JSONResponse(exc.body, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_, exc: RequestValidationError):
        error = _validation_error(exc)
        return JSONResponse(error.body, status_code=error.status)

    @app.exception_handler(HTTPException)
    async def _http(_, exc: HTTPException):
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(exc.detail), kind), status_code=exc.status_code)

    def check_model(name: str) -> None:
        if name != model_id:
            raise APIError(404, f"the model '{name}' does not exist; this server serves "
                                f"'{model_id}'", param="model", code="model_not_found")

    def submit(body: Union[ChatCompletionRequest, CompletionRequest], ids: List[int],
               top_logprobs: Optional[int], logprobs: bool):
        params = SamplingParams(temp=body.temperature, top_p=body.top_p, seed=body.seed,
                                logprobs=logprobs)
        try:
            return engine_loop.submit(ids, params, body.token_limit or default_max_tokens,
                                      body.stops, top_logprobs)
        except QueueFullError as e:
            raise APIError(503, str(e), "server_error", code="queue_full") from None
        except ValueError as e:
            raise APIError(400, str(e), param="messages" if hasattr(body, "messages")
                           else "prompt", code="context_length_exceeded") from None

    async def collect(generation) -> List[Event]:
        events: List[Event] = []
        async for event in generation.events():
            if event.error:
                raise APIError(500, event.error, "server_error")
            events.append(event)
        return events

    async def answer(http: Request, response: Response, generation, stream: bool,
                     include_usage: bool):
        if not stream:
            # A client that goes away before the whole answer is ready cancels it (its
            # KV blocks are freed), as a dropped stream does.
            task = asyncio.ensure_future(collect(generation))
            while not (await asyncio.wait({task}, timeout=DISCONNECT_POLL_SECONDS))[0]:
                if await http.is_disconnected():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    return JSONResponse(error_body("the client disconnected", "cancelled"),
                                        status_code=499)
            return JSONResponse(response.full(task.result()))

        def sse(obj) -> str:
            return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"

        async def body():
            first = response.first_chunk()
            if first:
                yield sse(first)
            async for event in generation.events():
                if event.error:
                    yield sse(error_body(event.error, "server_error"))
                    return
                if event.text or event.logprobs or event.finish_reason:
                    yield sse(response.chunk(event))
                if event.finish_reason and include_usage:
                    yield sse(response.usage_chunk(event))
            yield "data: [DONE]\n\n"

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, http: Request):
        check_model(body.model)
        messages = [{"role": m.role, "content": m.text} for m in body.messages]
        try:
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        except (ValueError, jinja2.TemplateError) as e:
            raise APIError(400, f"the chat template cannot render these messages: {e}",
                           param="messages") from None
        ids = tokenizer.encode(text, add_special_tokens=False)
        top = body.top_logprobs if body.logprobs else None
        generation = submit(body, ids, top, body.logprobs)
        return await answer(http, Response(True, model_id), generation, body.stream,
                            body.include_usage)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, http: Request):
        check_model(body.model)
        try:
            ids = prompt_ids(tokenizer, body.prompt)
        except (TypeError, ValueError) as e:
            raise APIError(400, str(e), param="prompt") from None
        # A client's id outside the vocabulary is its own error (400), found before the
        # engine thread, where it could only be reported as a 500.
        vocab = engine_loop.model.vocab_size
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise APIError(400, f"prompt token id {bad} is outside the model's vocabulary "
                                f"[0, {vocab})", param="prompt")
        generation = submit(body, ids, body.logprobs, body.logprobs is not None)
        return await answer(http, Response(False, model_id), generation, body.stream,
                            body.include_usage)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_id, "object": "model", "created": 0,
                                            "owned_by": "metalrt"}]}

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": model_id, "engine": engine_loop.stats()}

    return app
