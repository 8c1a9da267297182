"""Request bodies of the OpenAI endpoints, validated by pydantic.

Field names, types and ranges follow OpenAI's API reference (Chat Completions and the
legacy Completions). Fields OpenAI defines that this server does not implement are
refused (``extra="forbid"`` names them) rather than silently ignored, except those
that only label or shape a request without changing the tokens (``user``,
``metadata``, ``store``...).
"""
from __future__ import annotations

from typing import Any, ClassVar, Dict, List, Literal, Optional, Tuple, Union

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator,
                      model_validator)
from pydantic_core import PydanticCustomError

_IGNORED = ("user", "metadata", "store", "service_tier")
MAX_CHOICES = 16   # n: each choice is an engine request, all admitted together


class _Body(BaseModel):
    """A request object: unknown fields are refused, the ``IGNORED`` ones accepted and
    dropped (an API's labels and settings that change nothing here)."""

    model_config = ConfigDict(extra="forbid")
    IGNORED: ClassVar[Tuple[str, ...]] = _IGNORED

    @model_validator(mode="before")
    @classmethod
    def _drop_labels(cls, data):
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if k not in cls.IGNORED}
        return data


class StreamOptions(_Body):
    include_usage: StrictBool = False


class TextPart(_Body):
    """A text content part: ``{"type": "text", "text": ...}`` (images are refused)."""

    type: Literal["text"]
    text: str


class FunctionCall(_Body):
    name: str
    arguments: str


class ToolCallItem(_Body):
    """A call of an earlier assistant turn (``messages[].tool_calls[]``)."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, List[TextPart], None] = None
    name: Optional[str] = None
    tool_calls: Optional[List[ToolCallItem]] = None
    tool_call_id: Optional[str] = None

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts_only(cls, value):
        # Else pydantic reports the union's members ("Input should be 'text'") for an
        # image part; this server feeds text-only models.
        for part in value if isinstance(value, list) else ():
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in ("image_url", "input_audio", "file"):
                raise PydanticCustomError(
                    "content_part", "{kind} input is not supported by this server/model "
                    "(content parts must be of type 'text')",
                    {"kind": "image" if kind == "image_url" else kind.replace("input_", "")})
        return value

    @model_validator(mode="after")
    def _content_given(self):
        if self.role == "tool" and not self.tool_call_id:
            raise PydanticCustomError(
                "tool_call_id", "a message with role 'tool' needs the tool_call_id of the "
                "call it answers")
        # OpenAI's rule: only an assistant turn that calls tools may leave content null.
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise PydanticCustomError(
                "content", "a {role} message needs content (a string or text parts); null "
                "is allowed only for an assistant message with tool_calls",
                {"role": self.role})
        return self

    @property
    def text(self) -> str:
        """The message content as one string (text parts joined)."""
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class _Sampling(_Body):
    """What chat and text completions share: the model, sampling and stop settings.
    ``max_tokens`` None = the server's default (capped by the context length)."""

    model: str
    max_tokens: Optional[StrictInt] = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: StrictInt = Field(0, ge=0)   # vLLM's extension (0 = off); Anthropic's top_k
    seed: Optional[StrictInt] = Field(None, ge=0)
    stop: Union[str, List[str], None] = None
    stop_token_ids: List[StrictInt] = Field(default_factory=list)   # vLLM's extension
    stream: StrictBool = False
    stream_options: Optional[StreamOptions] = None
    n: StrictInt = Field(1, ge=1, le=MAX_CHOICES)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    logit_bias: Optional[Dict[str, float]] = None

    @field_validator("logit_bias")
    @classmethod
    def _bias_range(cls, value):
        bad = next((k for k, v in (value or {}).items() if not -100 <= v <= 100), None)
        if bad is not None:
            raise PydanticCustomError("logit_bias", "the bias of token {token} must be in "
                                      "[-100, 100]", {"token": bad})
        return value

    @property
    def stops(self) -> List[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or ())

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class Function(_Body):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: Optional[str] = None
    parameters: Dict[str, Any] = Field(default_factory=lambda: {"type": "object",
                                                                 "properties": {}})
    strict: Optional[bool] = None


class Tool(_Body):
    type: Literal["function"]
    function: Function


class NamedFunction(_Body):
    name: str


class NamedToolChoice(_Body):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(_Body):
    name: str = "response"
    description: Optional[str] = None
    schema_: Dict[str, Any] = Field(alias="schema")
    strict: Optional[bool] = None


class ResponseFormat(_Body):
    """``text``, ``json_object`` (any JSON object) or ``json_schema`` (its schema),
    the last two enforced by the grammar engine."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JsonSchemaFormat] = None

    @model_validator(mode="after")
    def _schema_given(self):
        if self.type == "json_schema" and self.json_schema is None:
            raise PydanticCustomError("json_schema", "type 'json_schema' needs json_schema")
        return self


class ChatCompletionRequest(_Sampling):
    messages: List[Message] = Field(min_length=1)
    tools: Optional[List[Tool]] = None
    tool_choice: Union[Literal["none", "auto", "required"], NamedToolChoice, None] = None
    parallel_tool_calls: StrictBool = True
    response_format: Optional[ResponseFormat] = None
    chat_template_kwargs: Dict[str, Any] = Field(default_factory=dict)
    max_completion_tokens: Optional[StrictInt] = Field(None, ge=1)
    logprobs: StrictBool = False
    top_logprobs: Optional[StrictInt] = Field(None, ge=0, le=20)

    @field_validator("top_logprobs")
    @classmethod
    def _needs_logprobs(cls, value, info):
        # OpenAI's rule; 0 asks for nothing, so it is let through.
        if value and not info.data.get("logprobs"):
            raise PydanticCustomError("top_logprobs", "top_logprobs needs logprobs: true")
        return value

    @field_validator("tools")
    @classmethod
    def _distinct_names(cls, value):
        names = [t.function.name for t in value or ()]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise PydanticCustomError("tools", "each tool needs its own name; {names} "
                                      "given more than once", {"names": ", ".join(twice)})
        return value

    @field_validator("messages")
    @classmethod
    def _results_answer_calls(cls, value):
        unknown = unknown_call(value)
        if unknown is not None:
            raise PydanticCustomError(
                "tool_call_id", "messages[{index}].tool_call_id '{id}' names no tool call "
                "of an earlier assistant message", {"index": unknown[0], "id": unknown[1]})
        return value

    @property
    def token_limit(self) -> Optional[int]:
        """``max_completion_tokens`` (OpenAI's newer name), else ``max_tokens``."""
        return self.max_completion_tokens or self.max_tokens


def unknown_call(messages: List[Message]) -> Optional[Tuple[int, str]]:
    """(index, call id) of the first ``tool`` message whose ``tool_call_id`` no earlier
    assistant message's ``tool_calls`` holds; None when each answers a call."""
    called = set()
    for i, m in enumerate(messages):
        called.update(call.id for call in m.tool_calls or ())
        if m.role == "tool" and m.tool_call_id not in called:
            return i, m.tool_call_id
    return None


def _describe(value) -> str:
    return f"{type(value).__name__} {value!r}" if len(repr(value)) <= 40 else type(value).__name__


class CompletionRequest(_Sampling):
    prompt: Union[str, List[StrictInt]]

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_form(cls, value):
        # Else pydantic reports each member of the union ("Input should be a valid
        # string" for [1.5]); OpenAI's error says what a prompt may be.
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            bad = next(((i, t) for i, t in enumerate(value)
                        if isinstance(t, bool) or not isinstance(t, int)), None)
            if bad is None:
                return value
            got = f"a list holding {_describe(bad[1])} at index {bad[0]}"
        else:
            got = _describe(value)
        raise PydanticCustomError(
            "prompt_type", "must be a string or a list of token ids (integers); got {got}",
            {"got": got})
    logprobs: Optional[StrictInt] = Field(None, ge=0, le=20)
    echo: StrictBool = False   # the prompt before the text (its logprobs with logprobs)

    @property
    def token_limit(self) -> Optional[int]:
        return self.max_tokens
