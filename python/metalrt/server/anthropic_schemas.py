"""The request body of Anthropic's Messages API (``POST /v1/messages``), validated by
pydantic, and its translation into the chat request the server already serves.

Field names, types and ranges follow Anthropic's API reference (and the ``anthropic``
package's ``MessageCreateParams``). Fields this server does not implement are refused
(``extra="forbid"`` names them), except those that only label, route or cache a
request without changing its tokens (``metadata``, ``service_tier``, ``speed``,
``cache_control``: the prefix cache works without being asked...). ``temperature``,
``top_p`` and ``top_k`` are taken although the newest API and client dropped them:
older clients and agents send them. Image and document blocks are refused with a
400 that says so: the server serves text models.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import (BaseModel, Discriminator, Field, StrictBool, StrictInt, Tag,
                      field_validator, model_validator)
from pydantic_core import PydanticCustomError
from typing_extensions import Annotated

from . import schemas
from .schemas import ChatCompletionRequest

_IGNORED = ("metadata", "service_tier", "cache_control", "speed", "inference_geo",
            "diagnostics", "user_profile_id", "workspace_id")
_UNSUPPORTED_BLOCKS = ("image", "document", "search_result")
JOIN = "\n\n"   # between text blocks: Claude Code style clients send instructions in several


class _Body(schemas._Body):
    IGNORED = _IGNORED   # Anthropic's labels, not OpenAI's


class TextBlock(_Body):
    type: Literal["text"]
    text: str


def _text_or(blocks):
    """A string or a list of ``blocks``: only the list's errors are reported for a
    list (a plain union would report "should be a valid string" first), and one error
    saying what is expected for anything else."""
    return Annotated[Union[Annotated[str, Tag("text")], Annotated[List[blocks], Tag("blocks")]],
                     Discriminator(lambda v: "text" if isinstance(v, str) else
                                   "blocks" if isinstance(v, list) else None,
                                   custom_error_type="content_type",
                                   custom_error_message="must be a string or a list of "
                                                        "content blocks")]


class ToolUseBlock(_Body):
    """A call of an earlier assistant turn."""

    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: Dict[str, Any]


class ToolResultBlock(_Body):
    """The result of the call ``tool_use_id``, in a user turn."""

    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: _text_or(TextBlock) = ""
    is_error: StrictBool = False

    @property
    def text(self) -> str:
        text = self.content if isinstance(self.content, str) else \
            JOIN.join(b.text for b in self.content)
        # The template has no field for a failed call: the model reads it in the text.
        return f"Error: {text}" if self.is_error else text


class ThinkingBlock(_Body):
    """Reasoning of an earlier assistant turn: accepted and left out of the prompt, as
    the chat templates of reasoning models leave out earlier turns' reasoning."""

    type: Literal["thinking"]
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(_Body):
    type: Literal["redacted_thinking"]
    data: str


Block = Annotated[Union[TextBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock,
                        RedactedThinkingBlock], Field(discriminator="type")]


class MessageParam(_Body):
    role: Literal["user", "assistant"]
    content: _text_or(Block)

    @field_validator("content", mode="before")
    @classmethod
    def _text_only(cls, value):
        if isinstance(value, list):
            kinds = {b.get("type") for b in value if isinstance(b, dict)}
            refused = sorted(kinds.intersection(_UNSUPPORTED_BLOCKS))
            if refused:
                raise PydanticCustomError(
                    "unsupported_block", "{kinds} content blocks are not supported: this "
                    "server serves a text model (text, tool_use, tool_result and thinking "
                    "blocks are)", {"kinds": " and ".join(refused)})
        return value

    @model_validator(mode="after")
    def _blocks_fit_the_role(self):
        if isinstance(self.content, list):
            kinds = {b.type for b in self.content}
            wrong = kinds - ({"text", "tool_result"} if self.role == "user" else
                             {"text", "tool_use", "thinking", "redacted_thinking"})
            if wrong:
                raise PydanticCustomError(
                    "block_role", "a {role} message cannot hold {kinds} blocks",
                    {"role": self.role, "kinds": ", ".join(sorted(wrong))})
        return self

    def blocks(self) -> List[BaseModel]:
        return [TextBlock(type="text", text=self.content)] \
            if isinstance(self.content, str) else list(self.content)


class ToolParam(_Body):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: Optional[str] = None
    input_schema: Dict[str, Any]
    type: Optional[Literal["custom"]] = None
    strict: Optional[bool] = None


class ToolChoice(_Body):
    type: Literal["auto", "any", "tool", "none"]
    name: Optional[str] = None
    disable_parallel_tool_use: StrictBool = False

    @model_validator(mode="after")
    def _name_with_tool(self):
        if (self.type == "tool") != (self.name is not None):
            raise PydanticCustomError(
                "tool_choice_name", "tool_choice needs a name exactly when its type is 'tool'")
        return self


class ThinkingConfig(_Body):
    """``enabled`` / ``disabled`` become the template's ``enable_thinking``;
    ``budget_tokens`` is accepted (Anthropic requires it) but only ``max_tokens``
    bounds the reply."""

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: Optional[StrictInt] = Field(None, ge=1)
    display: Optional[Literal["summarized", "omitted"]] = None

    @model_validator(mode="after")
    def _budget_when_enabled(self):
        if self.type == "enabled" and self.budget_tokens is None:
            raise PydanticCustomError("budget_tokens", "thinking of type 'enabled' needs "
                                      "budget_tokens")
        return self


class _Conversation(_Body):
    """What ``/v1/messages`` and ``/v1/messages/count_tokens`` share: the prompt."""

    model: str
    messages: List[MessageParam] = Field(min_length=1)
    system: Optional[_text_or(TextBlock)] = None
    tools: Optional[List[ToolParam]] = None
    tool_choice: Optional[ToolChoice] = None
    thinking: Optional[ThinkingConfig] = None

    @model_validator(mode="after")
    def _ends_with_a_user_turn(self):
        if self.messages[-1].role != "user":
            raise PydanticCustomError(
                "prefill", "the last message must be a user message (continuing an "
                "assistant prefill is not supported)")
        return self

    def _chat_body(self) -> Dict[str, Any]:
        """The chat request's messages, tools, tool_choice and template kwargs:
        ``system`` first, tool_result blocks as ``role: tool`` messages, tool_use
        blocks as ``tool_calls``, tool_choice ``any`` as ``required``, ``thinking`` as
        ``chat_template_kwargs.enable_thinking``. ValueError for a tool_result whose
        tool_use_id no earlier tool_use block has."""
        messages = []
        if self.system:
            messages.append({"role": "system", "content": self.system if isinstance(
                self.system, str) else JOIN.join(b.text for b in self.system)})
        called = set()
        for i, m in enumerate(self.messages):
            for block in m.blocks():
                if block.type == "tool_use":
                    called.add(block.id)
                elif block.type == "tool_result" and block.tool_use_id not in called:
                    raise ValueError(f"messages[{i}]: tool_result block with tool_use_id "
                                     f"{block.tool_use_id!r} answers no tool_use block of an "
                                     f"earlier assistant message")
            messages += _chat_messages(m)
        choice = None
        if self.tool_choice is not None:
            kind = self.tool_choice.type
            choice = {"type": "function", "function": {"name": self.tool_choice.name}} \
                if kind == "tool" else {"any": "required"}.get(kind, kind)
        body: Dict[str, Any] = {
            "model": self.model, "messages": messages, "tool_choice": choice,
            "parallel_tool_calls": not (self.tool_choice and
                                        self.tool_choice.disable_parallel_tool_use)}
        if self.tools:
            body["tools"] = [{"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.input_schema,
                "strict": t.strict}} for t in self.tools]
        if self.thinking is not None and self.thinking.type != "adaptive":
            body["chat_template_kwargs"] = {"enable_thinking": self.thinking.type == "enabled"}
        return body


class MessagesRequest(_Conversation):
    max_tokens: StrictInt = Field(ge=1)
    stop_sequences: Optional[List[str]] = None
    temperature: float = Field(1.0, ge=0.0, le=1.0)
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0)
    top_k: Optional[StrictInt] = Field(None, ge=0)
    stream: StrictBool = False

    def chat_request(self) -> ChatCompletionRequest:
        """The same request as a chat completion (``_chat_body`` and the sampling
        settings). Raises pydantic's ValidationError where the chat request is stricter."""
        body = {**self._chat_body(), "max_tokens": self.max_tokens,
                "temperature": self.temperature, "stop": self.stop_sequences,
                "stream": self.stream}
        if self.top_p is not None:
            body["top_p"] = self.top_p
        if self.top_k is not None:
            body["top_k"] = self.top_k
        return ChatCompletionRequest.model_validate(body)


class CountTokensRequest(_Conversation):
    """``POST /v1/messages/count_tokens``: a Messages request's prompt, no sampling
    settings (Anthropic's ``MessageCountTokensParams``); a field that ``/v1/messages``
    refuses is refused here too."""

    def chat_request(self) -> ChatCompletionRequest:
        """The chat request whose prompt is counted (one token of reply: unused).
        Raises pydantic's ValidationError where the chat request is stricter."""
        return ChatCompletionRequest.model_validate({**self._chat_body(), "max_tokens": 1})


def _chat_messages(m: MessageParam) -> List[dict]:
    """One Anthropic message as chat messages (a user turn with tool results is a
    ``tool`` message per result, its text a user message)."""
    out: List[dict] = []
    text: List[str] = []
    calls = []
    for block in m.blocks():
        if block.type == "text":
            text.append(block.text)
        elif block.type == "tool_use":
            calls.append({"id": block.id, "type": "function", "function": {
                "name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)}})
        elif block.type == "tool_result":
            if text:   # text before a result stays before it
                out.append({"role": "user", "content": JOIN.join(text)})
                text = []
            out.append({"role": "tool", "tool_call_id": block.tool_use_id,
                        "content": block.text})
    if m.role == "assistant":
        out.append({"role": "assistant", "content": JOIN.join(text),
                    **({"tool_calls": calls} if calls else {})})
    elif text or not out:
        out.append({"role": "user", "content": JOIN.join(text)})
    return out
