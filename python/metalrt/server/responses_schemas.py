"""The request body of OpenAI's Responses API (``POST /v1/responses``), validated by
pydantic, and its translation into the chat request the server already serves.

Stateless: ``input`` is a string or the whole conversation as input items — messages
(roles user/system/developer/assistant, content a string or ``input_text`` /
``output_text`` parts), ``function_call`` items of earlier turns and their
``function_call_output`` results; ``reasoning`` items of earlier turns are accepted and
left out of the prompt (chat templates drop earlier reasoning too). What needs stored
responses (``previous_response_id``, ``conversation``, ``item_reference`` items) is a
400 saying so. Tools are function tools in the Responses shape (flat: ``name``,
``parameters``... beside ``type``); ``text.format`` is ``text``, ``json_object`` or a
flat ``json_schema`` (``name``, ``schema``, ``strict``).
"""
from __future__ import annotations

from typing import Annotated, Any, Dict, List, Literal, Optional, Union

from pydantic import (Field, StrictBool, StrictInt, TypeAdapter, ValidationError,
                      field_validator, model_validator)
from pydantic_core import PydanticCustomError

from .schemas import ChatCompletionRequest, Function, JsonSchemaFormat, _Body

_STORED = ("this server does not store responses: send the whole conversation as input "
           "items instead of {what}")


def _validate_list(adapter: TypeAdapter, value: list, what: str, prepare=lambda v: v):
    """``value`` validated by ``adapter``; a bad member reported as itself ("{what}
    [i]..."), not as "not a string" (the other form the field takes)."""
    members = [prepare(v) for v in value]
    try:
        return adapter.validate_python(members)
    except ValidationError as e:
        first = e.errors()[0]
        loc = list(first["loc"])
        if len(loc) > 1 and isinstance(members[loc[0]], dict) \
                and loc[1] == members[loc[0]].get("type"):
            del loc[1]   # the member's type, which pydantic puts in the path
        where = "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in loc)
        raise PydanticCustomError("list_member", "{what}{where}: {message}",
                                  {"what": what, "where": where,
                                   "message": first["msg"]}) from None


class InputText(_Body):
    """A text content part: ``input_text`` (user, system, developer) or ``output_text``
    (an assistant message of an earlier response, its annotations and logprobs ignored)."""

    type: Literal["input_text", "output_text"]
    text: str
    annotations: Optional[List[Any]] = None
    logprobs: Optional[List[Any]] = None


_PARTS = TypeAdapter(List[InputText])


def _parts(cls, value):
    return _validate_list(_PARTS, value, "part") if isinstance(value, list) else value


def _joined(value: Union[str, List[InputText]]) -> str:
    """A string, or the text of ``input_text`` / ``output_text`` parts put together."""
    return value if isinstance(value, str) else "".join(part.text for part in value)


class MessageItem(_Body):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: Union[str, List[InputText]]
    id: Optional[str] = None
    status: Optional[str] = None
    phase: Optional[str] = None

    content_parts = field_validator("content", mode="before")(_parts)

    @property
    def text(self) -> str:
        return _joined(self.content)


class FunctionCallItem(_Body):
    """A call the model made in an earlier turn."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str
    arguments: str
    id: Optional[str] = None
    status: Optional[str] = None


class FunctionCallOutputItem(_Body):
    """The result of the call ``call_id``: a string or ``input_text`` parts."""

    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: Union[str, List[InputText]]
    id: Optional[str] = None
    status: Optional[str] = None

    output_parts = field_validator("output", mode="before")(_parts)

    @property
    def text(self) -> str:
        return _joined(self.output)


class ReasoningItem(_Body):
    """The reasoning of an earlier turn: accepted, not put in the prompt."""

    type: Literal["reasoning"]
    id: Optional[str] = None
    summary: List[Any] = Field(default_factory=list)
    content: Optional[List[Any]] = None
    encrypted_content: Optional[str] = None
    status: Optional[str] = None


class ItemReference(_Body):
    type: Literal["item_reference"]
    id: str

    @model_validator(mode="after")
    def _needs_storage(self):
        raise PydanticCustomError("stored", _STORED.format(what="an item_reference"))


def _item_type(data):
    # A message may leave its type out (OpenAI's "easy input message").
    if isinstance(data, dict) and "type" not in data and "role" in data:
        return {**data, "type": "message"}
    return data


InputItem = Annotated[Union[MessageItem, FunctionCallItem, FunctionCallOutputItem,
                            ReasoningItem, ItemReference], Field(discriminator="type")]


_ITEMS = TypeAdapter(List[InputItem])


class FunctionTool(Function):
    """A function tool: ``{"type": "function", "name", "description", "parameters",
    "strict"}`` (the chat API nests these under ``function``)."""

    type: Literal["function"]

    @model_validator(mode="before")
    @classmethod
    def _functions_only(cls, data):
        if isinstance(data, dict) and data.get("type") != "function":
            raise PydanticCustomError("tool_type", "only function tools are served, not "
                                      "'{kind}'", {"kind": data.get("type")})
        return data


class NamedTool(_Body):
    type: Literal["function"]
    name: str


class TextFormat(_Body):
    """``text.format``: ``text``, ``json_object`` or ``json_schema`` with the schema's
    ``name``, ``schema``, ``description`` and ``strict`` beside ``type``."""

    type: Literal["text", "json_object", "json_schema"]
    name: Optional[str] = None
    schema_: Optional[Dict[str, Any]] = Field(None, alias="schema")
    description: Optional[str] = None
    strict: Optional[bool] = None

    @model_validator(mode="after")
    def _schema_given(self):
        if self.type == "json_schema" and self.schema_ is None:
            raise PydanticCustomError("json_schema", "type 'json_schema' needs schema")
        return self


class TextConfig(_Body):
    format: TextFormat = Field(default_factory=lambda: TextFormat(type="text"))
    verbosity: Optional[Literal["low", "medium", "high"]] = None


class Reasoning(_Body):
    """Accepted and echoed; whether the model reasons is up to its template (and the
    server's ``--reasoning-format``)."""

    effort: Optional[str] = None
    summary: Optional[str] = None
    generate_summary: Optional[str] = None


class ResponsesRequest(_Body):
    model: str
    input: Union[str, List[InputItem]]
    instructions: Optional[str] = None
    tools: List[FunctionTool] = Field(default_factory=list)
    tool_choice: Union[Literal["none", "auto", "required"], NamedTool] = "auto"
    parallel_tool_calls: StrictBool = True
    text: TextConfig = Field(default_factory=TextConfig)
    reasoning: Optional[Reasoning] = None
    max_output_tokens: Optional[StrictInt] = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: Optional[StrictInt] = Field(None, ge=0)   # an extension, as in chat
    stream: StrictBool = False
    include: List[str] = Field(default_factory=list)   # nothing extra to include
    truncation: Literal["disabled"] = "disabled"
    previous_response_id: Optional[str] = None
    conversation: Optional[Any] = None

    @field_validator("input", mode="before")
    @classmethod
    def _input_items(cls, value):
        if not isinstance(value, list):
            return value
        if not value:
            raise PydanticCustomError("input_empty", "the list holds no items")
        return _validate_list(_ITEMS, value, "item", _item_type)

    @field_validator("previous_response_id", "conversation")
    @classmethod
    def _stateless(cls, value, info):
        if value is not None:
            raise PydanticCustomError("stored", _STORED.format(what=info.field_name))
        return value

    def chat_request(self) -> ChatCompletionRequest:
        """The same request in the chat API's shape (``instructions`` first as a system
        message; consecutive function calls one assistant turn). ValueError when no
        message is left or a function_call_output answers no earlier function_call."""
        messages: List[dict] = []
        if self.instructions:
            messages.append({"role": "system", "content": self.instructions})
        items = [MessageItem(role="user", content=self.input)] \
            if isinstance(self.input, str) else self.input
        called = set()
        for k, item in enumerate(items):
            if isinstance(item, MessageItem):
                messages.append({"role": item.role, "content": item.text})
            elif isinstance(item, FunctionCallItem):
                call = {"id": item.call_id, "type": "function",
                        "function": {"name": item.name, "arguments": item.arguments}}
                if not (messages and messages[-1]["role"] == "assistant"):
                    messages.append({"role": "assistant", "content": None})
                messages[-1].setdefault("tool_calls", []).append(call)
                called.add(item.call_id)
            elif isinstance(item, FunctionCallOutputItem):
                if item.call_id not in called:
                    raise ValueError(f"input[{k}].call_id {item.call_id!r} names no "
                                     f"function_call item before it")
                messages.append({"role": "tool", "tool_call_id": item.call_id,
                                 "content": item.text})
        if not messages:
            raise ValueError("input holds no message, function call or function call "
                             "output (reasoning items are not put in the prompt)")
        fmt = self.text.format
        body: Dict[str, Any] = {
            "model": self.model, "messages": messages,
            "max_completion_tokens": self.max_output_tokens,
            "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed,
            "parallel_tool_calls": self.parallel_tool_calls,
            "tools": [{"type": "function",
                       "function": t.model_dump(exclude={"type"}, exclude_none=True)}
                      for t in self.tools] or None,
            "tool_choice": ({"type": "function", "function": {"name": self.tool_choice.name}}
                            if isinstance(self.tool_choice, NamedTool) else self.tool_choice),
            "response_format": None if fmt.type == "text" else {
                "type": fmt.type, "json_schema": None if fmt.type == "json_object" else
                JsonSchemaFormat(name=fmt.name or "response", schema=fmt.schema_,
                                 strict=fmt.strict).model_dump(by_alias=True)}}
        return ChatCompletionRequest.model_validate(body)
