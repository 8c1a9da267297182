"""The FastAPI application: OpenAI's ``/v1/chat/completions``, ``/v1/responses``
(stateless), ``/v1/completions`` and ``/v1/models``, Anthropic's ``/v1/messages``
(and ``/v1/messages/count_tokens``), plus
``/health`` with the engine's counters and ``/metrics``. Responses and Messages requests
are translated into chat requests and served by the chat path.

Errors use OpenAI's shape and status codes (Anthropic's shape under ``/v1/messages``):
400 ``invalid_request_error`` for a body that does not validate (malformed JSON
included) or a prompt the model cannot take, 401 for a missing or wrong API key, 404
``model_not_found`` for a model id the server does not serve, 503 when the queue is full
or the model cannot be loaded within ``--max-memory`` now, 500 when a forward step fails.

Each request picks its model by ``model`` from the ModelRegistry, which loads it on
first use and evicts idle ones under the memory budget (``model_registry.py``).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
from typing import List, Optional, Union

import jinja2
import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response as HTTPResponse, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from ..generation import prompt_ids
from ..runner import SamplingParams
from . import anthropic_format, grammar, harmony
from .api_key import authorized, unauthorized_body
from .anthropic_schemas import CountTokensRequest, MessagesRequest
from .chat_output import ChatOutput
from .engine_loop import Event, QueueFullError
from .model_registry import ModelRegistry, ModelUnavailableError, UnknownModelError
from .openai_format import Response, error_body
from .responses_format import ResponsesReply
from .responses_schemas import ResponsesRequest
from .metrics import Metrics
from .penalties import OpenAIPenalties
from .schemas import ChatCompletionRequest, CompletionRequest, NamedToolChoice
from .served_model import ServedModel
from .tool_parsers import tools_system_prompt


DISCONNECT_POLL_SECONDS = 0.25   # how often a non-streamed request checks for its client
ANTHROPIC_PATH = "/v1/messages"   # errors at it and under it take Anthropic's shape


class APIError(Exception):
    """An error answered in OpenAI's shape with ``status``."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 param: Optional[str] = None, code: Optional[str] = None):
        super().__init__(message)
        self.status, self.body = status, error_body(message, type_, param, code)


def _error_response(http: Request, status: int, body: dict) -> JSONResponse:
    """``body`` (OpenAI's error shape) answered with ``status``, in Anthropic's shape
    under its paths."""
    if http.url.path == ANTHROPIC_PATH or http.url.path.startswith(ANTHROPIC_PATH + "/"):
        body = anthropic_format.error_body(status, body["error"]["message"])
    return JSONResponse(body, status_code=status)


# What a member of a union (pydantic names it in an error's location) expects.
_MEMBERS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean",
            "dict": "an object", "none": "null", "blocks": "a list of content blocks"}


def _member(segment) -> Optional[str]:
    """What the union member that ``segment`` of an error location names expects; None
    for a field name or a list index."""
    if not isinstance(segment, str):
        return None
    if segment in _MEMBERS:
        return _MEMBERS[segment]
    if segment.startswith("literal["):
        return "one of " + segment[len("literal["):-1].replace(",", ", ")
    if segment.startswith("list["):
        items = _member(segment[len("list["):-1]) or "an object"
        return "a list of " + items.split(" ", 1)[1] + "s"   # "a string" -> "strings"
    if segment[:1].isupper() or segment.startswith(("dict[", "function-", "tagged-union[")):
        return "an object"
    return None


def _said(error: dict) -> str:
    """pydantic's message of ``error`` without its class names."""
    if error.get("type") in ("model_type", "model_attributes_type", "dict_type"):
        return "Input should be an object"
    return error.get("msg", "")


def _validation_error(exc: RequestValidationError) -> APIError:
    """The 400 of a body that does not validate: its first error, named by the field's
    path; a union's alternatives (pydantic reports one error per member) as one
    message saying what each expects, with the error of the member that got furthest."""
    errors = exc.errors()
    if errors[0].get("type") == "json_invalid":
        detail = (errors[0].get("ctx") or {}).get("error") or errors[0].get("msg")
        return APIError(400, f"the request body is not valid JSON: {detail}")
    locs = [[p for p in e.get("loc", ()) if p != "body"] for e in errors]
    loc = locs[0]
    if not loc:   # the body as a whole: not an object (or none), or a rule across fields
        return APIError(400, "the request body must be a JSON object"
                        if errors[0].get("type") in ("missing", "model_attributes_type")
                        else _said(errors[0]))
    cut = next((i for i, p in enumerate(loc) if _member(p)), None)
    if cut is None:
        param = ".".join(str(p) for p in loc)
        return APIError(400, f"{param}: {_said(errors[0])}", param=param)
    union = loc[:cut]
    members = [(l, e) for l, e in zip(locs, errors)
               if len(l) > cut and l[:cut] == union and _member(l[cut])]
    tried = dict.fromkeys(_member(l[cut]) for l, _ in members)
    param = ".".join(str(p) for p in union)
    deepest, error = max(members, key=lambda m: len(m[0]))
    detail = ""
    if len(deepest) > cut + 1:
        detail = " (" + ".".join(str(p) for p in deepest if not _member(p)) + \
            f": {_said(error)})"
    return APIError(400, f"{param}: must be {' or '.join(tried)}{detail}", param=param)


# The chat request's fields that an error names, as the Responses API calls them
# (the input items are not the chat messages one for one, so no index is kept).
_RESPONSES_NAMES = {"response_format.json_schema.schema": "text.format.schema",
                    "response_format": "text.format", "messages": "input"}


def _responses_error(error: APIError) -> APIError:
    """``error`` of the chat request a Responses request became, in the Responses
    API's names."""
    body = error.body["error"]
    for chat, responses in _RESPONSES_NAMES.items():
        if chat.startswith("response_format"):
            body["message"] = body["message"].replace(chat, responses)
        if (body["param"] or "").startswith(chat):
            body["param"] = responses
    return error


def _template_messages(body: ChatCompletionRequest, tools: list, parser, knows_tools: bool):
    """The request's messages as the chat template reads them. A template that knows
    tools gets the calls of earlier turns with their arguments as objects (as
    transformers' templates expect); one that does not gets the tools described in the
    system message and earlier calls written in the parser's syntax."""
    messages = []
    for m in body.messages:
        item = {"role": m.role, "content": m.text}
        if m.tool_call_id:
            item["tool_call_id"] = m.tool_call_id
        if m.name:
            item["name"] = m.name
        if m.tool_calls:
            calls = []
            for c in m.tool_calls:
                try:
                    arguments = json.loads(c.function.arguments)
                except ValueError:
                    arguments = c.function.arguments
                calls.append({"id": c.id, "type": "function",
                              "function": {"name": c.function.name, "arguments": arguments}})
            if knows_tools:
                item["tool_calls"] = calls
            else:
                item["content"] += "".join(
                    '<tool_call>\n' + json.dumps({"name": c["function"]["name"],
                                                   "arguments": c["function"]["arguments"]})
                    + '\n</tool_call>' for c in calls)
        messages.append(item)
    if tools and not knows_tools:
        described = tools_system_prompt(tools, parser)
        if messages[0]["role"] in ("system", "developer"):
            messages[0] = {**messages[0], "content": messages[0]["content"] + "\n\n" + described}
        else:
            messages.insert(0, {"role": "system", "content": described})
    return messages


def _choice_seed(seed: Optional[int], index: int) -> Optional[int]:
    """The seed of choice ``index``: the request's own for choice 0 (so n=1 draws as
    before), one derived from (seed, index) for the others, so each choice draws its own
    stream and the same request draws the same choices; None (fresh entropy) without."""
    if seed is None or index == 0:
        return seed
    return int(np.random.SeedSequence([seed, index]).generate_state(1, np.uint64)[0] >> 1)


def create_app(registry: ModelRegistry, default_max_tokens: int = 512,
               api_key: Optional[str] = None) -> FastAPI:
    """The application serving the models of ``registry`` (ServedModels: the model's
    ``reasoning_format`` is set there); a request without ``max_tokens`` generates at
    most ``default_max_tokens``. ``api_key``: every path but ``/health`` needs it, as
    ``Authorization: Bearer KEY`` or ``x-api-key: KEY`` (else 401). The loaded models
    are closed when the application shuts down."""
    @contextlib.asynccontextmanager
    async def lifespan(_):
        yield
        registry.close()

    app = FastAPI(title="metalrt", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.registry = registry
    metrics = Metrics(lambda: {i: m.engine_loop for i, m in list(registry.loaded.items())})
    for served in registry.loaded.values():
        served.engine_loop.observer = metrics.observer(served.id)

    if api_key is not None:
        @app.middleware("http")
        async def _authorize(http: Request, call_next):
            if not authorized(http.headers, http.url.path, api_key):
                return _error_response(http, 401, unauthorized_body())
            return await call_next(http)

    @app.exception_handler(APIError)
    async def _api_error(http: Request, exc: APIError):
        return _error_response(http, exc.status, exc.body)

    @app.exception_handler(RequestValidationError)
    async def _invalid(http: Request, exc: RequestValidationError):
        error = _validation_error(exc)
        return _error_response(http, error.status, error.body)

    @app.exception_handler(HTTPException)
    async def _http(http: Request, exc: HTTPException):
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        # Starlette's "Not Found" / "Method Not Allowed" say what was asked.
        message = {404: f"{http.url.path} is not an endpoint of this server",
                   405: f"{http.url.path} does not take {http.method} requests"}.get(
            exc.status_code, str(exc.detail))
        return _error_response(http, exc.status_code, error_body(message, kind))

    async def model_for(name: str) -> ServedModel:
        """The loaded model ``name`` (loaded now when it is not): APIError 404 for a
        model not served, 503 when it cannot be loaded now."""
        try:
            served = await registry.acquire(name)
        except UnknownModelError as e:
            raise APIError(404, str(e), param="model", code="model_not_found") from None
        except ModelUnavailableError as e:
            raise APIError(503, str(e), "server_error", code="model_unavailable") from None
        broken = getattr(served.model, "broken", None)   # a pipeline whose stage died
        if broken is not None:
            raise APIError(503, broken, "server_error", code="model_broken")
        if served.engine_loop.observer is None:   # loaded now (again): a new engine loop
            served.engine_loop.observer = metrics.observer(served.id)
        return served

    def submit(m: ServedModel, body: Union[ChatCompletionRequest, CompletionRequest],
               ids: List[int], top_logprobs: Optional[int], logprobs: bool, processors=list,
               prompt_logprobs: Optional[int] = None):
        """The generation of ``body``'s ``n`` choices on ``m``; ``processors()``: a
        choice's fresh logits processors (a grammar follows one reply)."""
        choices = []
        for i in range(body.n):
            mine = list(processors())
            if body.frequency_penalty or body.presence_penalty or body.logit_bias:
                mine.insert(0, OpenAIPenalties(body.frequency_penalty, body.presence_penalty,
                                               token_bias(m, body.logit_bias or {})))
            choices.append(SamplingParams(
                temp=body.temperature, top_p=body.top_p, top_k=body.top_k,
                seed=_choice_seed(body.seed, i), logprobs=logprobs,
                logits_processors=tuple(mine)))
        try:
            return m.engine_loop.submit(ids, choices[0], body.token_limit or default_max_tokens,
                                        body.stops, top_logprobs, body.stop_token_ids,
                                        choices[1:], prompt_logprobs)
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

    def check_stop_ids(m: ServedModel, body) -> None:
        vocab = m.vocab_size
        bad = next((t for t in body.stop_token_ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise APIError(400, f"stop_token_ids holds {bad}, outside the model's vocabulary "
                                f"[0, {vocab})", param="stop_token_ids")

    def token_bias(m: ServedModel, bias: dict) -> dict:
        """logit_bias with int keys; APIError 400 for a key that is no token id."""
        vocab, out = m.vocab_size, {}
        for key, value in bias.items():
            if not (key.isdigit() and int(key) < vocab):
                raise APIError(400, f"logit_bias keys must be token ids in [0, {vocab}), got "
                                    f"{key!r}", param="logit_bias")
            out[int(key)] = value
        return out

    def constraint(body: ChatCompletionRequest, tools: dict, parser) -> Optional[str]:
        """The grammar the reply must follow, None when it is free; APIError 400 for
        a tool_choice that names no tool of the request."""
        choice = body.tool_choice
        if tools and choice == "required":
            return parser.grammar(tools, body.parallel_tool_calls)
        if tools and not isinstance(choice, (str, type(None))):
            name = choice.function.name
            if name not in tools:
                raise APIError(400, f"tool_choice names the function '{name}', which is not "
                                    f"in tools ({', '.join(tools)})", param="tool_choice")
            return parser.grammar({name: tools[name]}, False)
        if isinstance(choice, NamedToolChoice) or choice == "required":
            raise APIError(400, f"tool_choice {choice!r} needs tools", param="tool_choice")
        fmt = body.response_format
        if fmt is None or fmt.type == "text":
            return None
        schema = {"type": "object"} if fmt.type == "json_object" else fmt.json_schema.schema_
        try:
            rule = grammar.json_schema_grammar(schema)   # ValueError for a bad schema
        except ValueError as e:
            raise APIError(400, f"response_format.json_schema.schema is not a usable JSON "
                                f"schema: {e}", param="response_format") from None
        # A harmony model answers in its final channel, after its reasoning.
        return harmony.final_grammar(schema) if parser is harmony.CALL_SYNTAX else rule

    async def answer(http: Request, response, generation, stream: bool):
        """The HTTP answer of ``response`` to ``generation``: one JSON object
        (``full``), or the stream of its ``stream_*`` events (the reply protocol of
        ``sse.py``: an openai_format.Response, a ResponsesReply or a MessagesResponse)."""
        if not stream:
            # A client that goes away before the whole answer is ready cancels it (its
            # KV blocks are freed), as a dropped stream does.
            task = asyncio.ensure_future(collect(generation))
            while not (await asyncio.wait({task}, timeout=DISCONNECT_POLL_SECONDS))[0]:
                if await http.is_disconnected():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    return _error_response(http, 499, error_body("the client disconnected",
                                                                 "cancelled"))
            return JSONResponse(response.full(task.result()))

        async def body():
            for text in response.stream_start():
                yield text
            async for event in generation.events():
                if event.error:
                    for text in response.stream_error(event.error):
                        yield text
                    return
                for text in response.stream_event(event):
                    yield text
            for text in response.stream_end():
                yield text

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    def render_chat(m: ServedModel, body: ChatCompletionRequest):
        """(prompt, tools {name: parameters}, grammar or None) of a chat request: its
        tools and messages rendered by the model's chat template (the prompt's text), or
        for a harmony model by openai-harmony (its token ids). APIError 400 for what the
        request gets wrong (the handlers check the model first)."""
        offered = [] if body.tool_choice == "none" else [t.model_dump() for t in body.tools or ()]
        tools = {t["function"]["name"]: t["function"]["parameters"] for t in offered}
        rule = constraint(body, tools, harmony.CALL_SYNTAX if m.harmony else m.parser)
        check_stop_ids(m, body)
        messages = _template_messages(body, offered, m.parser, m.knows_tools or bool(m.harmony))
        try:
            if m.harmony:
                effort = body.chat_template_kwargs.get("reasoning_effort", "medium")
                return harmony.render(messages, offered, m.harmony, effort), tools, rule
            text = m.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                 tools=offered or None,
                                                 **body.chat_template_kwargs)
        except (ValueError, TypeError, jinja2.TemplateError) as e:
            raise APIError(400, f"the chat template cannot render these messages: {e}",
                           param="messages") from None
        return text, tools, rule

    def chat_ids(m: ServedModel, prompt) -> List[int]:
        """The token ids of ``render_chat``'s prompt."""
        return prompt if isinstance(prompt, list) else \
            m.tokenizer.encode(prompt, add_special_tokens=False)

    def start_chat(m: ServedModel, body: ChatCompletionRequest):
        """(generation, split) of a chat request: ``render_chat``'s prompt submitted with
        its grammar; ``split`` turns the reply's text into reasoning, content and tool
        calls. APIError 400 as ``render_chat``."""
        text, tools, rule = render_chat(m, body)

        def processors():
            if rule is None:
                return []
            try:
                return [m.grammars.processor(rule)]
            except ValueError as e:
                raise APIError(400, f"the grammar of this request is invalid: {e}",
                               param="response_format" if body.response_format else
                               "tool_choice") from None

        ids = chat_ids(m, text)
        top = body.top_logprobs if body.logprobs else None
        generation = submit(m, body, ids, top, body.logprobs, processors)
        if m.harmony:
            return generation, harmony.HarmonyOutput(m.harmony, tools)
        # A forced call or JSON reply is not reasoning; a reply starts inside <think>
        # when the template opened it in the prompt.
        split = ChatOutput(m.parser if tools else None, tools, m.reasoning and rule is None,
                           thinking=text.rstrip().endswith("<think>"))
        return generation, split

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, http: Request):
        m = await model_for(body.model)
        generation, split = start_chat(m, body)
        return await answer(http, Response(True, m.id, split, body.include_usage, body.n),
                            generation, body.stream)

    def translated(body: Union[ResponsesRequest, MessagesRequest, CountTokensRequest],
                   rename=lambda error: error) -> ChatCompletionRequest:
        """The chat request a Responses or Messages request becomes; APIError 400
        (through ``rename``) when the chat request does not validate."""
        try:
            return body.chat_request()
        except ValidationError as e:
            raise rename(_validation_error(RequestValidationError(e.errors()))) from None
        except ValueError as e:   # an input the translation refuses
            raise APIError(400, str(e), param="input" if isinstance(body, ResponsesRequest)
                           else "messages") from None

    @app.post("/v1/responses")
    async def responses(body: ResponsesRequest, http: Request):
        m = await model_for(body.model)
        chat = translated(body, _responses_error)
        try:
            generation, split = start_chat(m, chat)
        except APIError as e:
            raise _responses_error(e) from None
        reply = ResponsesReply(body.model_dump(mode="json", by_alias=True,
                                               exclude_none=True), m.id, split,
                               lambda text: len(m.tokenizer.encode(text, add_special_tokens=False)))
        return await answer(http, reply, generation, body.stream)

    @app.post("/v1/messages")
    async def messages(body: MessagesRequest, http: Request):
        m = await model_for(body.model)
        generation, split = start_chat(m, translated(body))
        return await answer(http, anthropic_format.MessagesResponse(
            m.id, split, len(generation.ids)), generation, body.stream)

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(body: CountTokensRequest):
        m = await model_for(body.model)
        prompt, _, _ = render_chat(m, translated(body))
        return {"input_tokens": len(chat_ids(m, prompt))}

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, http: Request):
        m = await model_for(body.model)
        try:
            ids = prompt_ids(m.tokenizer, body.prompt)
        except (TypeError, ValueError) as e:
            raise APIError(400, str(e), param="prompt") from None
        # A client's id outside the vocabulary is its own error (400), found before the
        # engine thread, where it could only be reported as a 500.
        vocab = m.vocab_size
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise APIError(400, f"prompt token id {bad} is outside the model's vocabulary "
                                f"[0, {vocab})", param="prompt")
        check_stop_ids(m, body)
        scored = body.logprobs if body.echo else None
        generation = submit(m, body, ids, body.logprobs, body.logprobs is not None,
                            prompt_logprobs=scored)
        # OpenAI echoes a text prompt as given; token ids as their text.
        echo = (body.prompt if isinstance(body.prompt, str) else m.tokenizer.decode(ids)) \
            if body.echo else None
        return await answer(http, Response(False, m.id, include_usage=body.include_usage,
                                           n=body.n, echo=echo,
                                           echo_logprobs=scored is not None),
                            generation, body.stream)

    @app.get("/v1/models")
    async def models():
        # OpenAI's model objects, with LM Studio's "state" (loaded / not-loaded) and the
        # memory a loaded model takes (weights + KV cache, bytes).
        data = []
        for name in registry.ids:
            served = registry.loaded.get(name)
            data.append({"id": name, "object": "model", "created": 0, "owned_by": "metalrt",
                         "state": "loaded" if served else "not-loaded",
                         "memory_bytes": served.memory_bytes if served else None})
        return {"object": "list", "data": data}

    @app.get("/metrics")
    async def prometheus():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return HTTPResponse(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/health")
    async def health():
        # "model"/"engine": the first model (its stats None while it is not loaded).
        stats = {name: m.engine_loop.stats() for name, m in list(registry.loaded.items())}
        first = registry.ids[0]
        # A pipeline whose stage died answers nothing any more: 503, so that a host's
        # health check (Ray Serve's check_health, a load balancer) replaces the server.
        broken = {name: m.model.broken for name, m in list(registry.loaded.items())
                  if getattr(m.model, "broken", None) is not None}
        body = {"status": "broken" if broken else "ok", "model": first,
                "engine": stats.get(first), "models": stats}
        if broken:
            return JSONResponse({**body, "errors": broken}, status_code=503)
        return body

    return app
