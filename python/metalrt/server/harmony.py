"""gpt-oss's harmony format through ``openai-harmony`` (PyPI), offline.

openai-harmony tokenizes with the o200k vocabulary, which it downloads at first use
unless ``TIKTOKEN_ENCODINGS_BASE`` names a directory holding ``o200k_base.tiktoken``
(it then reads that file and checks its sha256 against the published one). A served
gpt-oss model carries the same vocabulary in its own tokenizer (``tokenizer.json`` or
the GGUF's token list, as GPT-2 byte-level strings, rank = id), so ``vocab_file``
writes the tiktoken file from it: nothing is downloaded, and a vocabulary that is not
o200k's is refused by openai-harmony's hash check.

``render`` writes a chat request's messages and tools as a harmony prompt (token ids,
ending in ``<|start|>assistant``) with openai-harmony's own renderer; ``parse`` splits
a completion (the text after that prompt, special tokens kept) into reasoning (the
``analysis`` channel), content (``final``) and tool calls (``commentary`` messages to
``functions.NAME``); ``HarmonyOutput`` does so as the completion streams;
``call_grammar`` is the llguidance grammar of a forced call in harmony's syntax,
``final_grammar`` that of a JSON answer (``response_format``) in its final channel.
"""
from __future__ import annotations

import base64
import json
import os
from functools import lru_cache
from typing import Dict, List, Optional, Sequence, Tuple

from .chat_output import call_deltas
from .tool_parsers import ToolCall

VOCAB_NAME = "o200k_base.tiktoken"
ENCODINGS_VAR = "TIKTOKEN_ENCODINGS_BASE"
FIRST_SPECIAL = 199998   # o200k's ordinary tokens are ranks 0 .. 199997


def _byte_of_char() -> Dict[str, int]:
    """GPT-2's byte-level alphabet: the character each byte is written as, reversed."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1),
                 *range(0xAE, 0xFF + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def vocab_file(tokens: Sequence[str], directory: str) -> str:
    """Writes ``directory/o200k_base.tiktoken`` from a byte-level BPE vocabulary
    (``tokens[i]`` the string of id ``i``, as tokenizer.json's ``model.vocab`` or a
    GGUF's ``tokenizer.ggml.tokens`` list them) and returns its path. ValueError when
    the vocabulary has fewer than 199998 tokens or one is not byte-level text."""
    if len(tokens) < FIRST_SPECIAL:
        raise ValueError(f"[harmony] the vocabulary has {len(tokens)} tokens; o200k has "
                         f"{FIRST_SPECIAL} before its special tokens")
    byte_of = _byte_of_char()
    lines = []
    for rank, token in enumerate(tokens[:FIRST_SPECIAL]):
        try:
            raw = bytes(byte_of[c] for c in token)
        except KeyError:
            raise ValueError(f"[harmony] token {rank} ({token!r}) is not byte-level BPE "
                             f"text") from None
        lines.append(f"{base64.b64encode(raw).decode()} {rank}\n")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, VOCAB_NAME)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="ascii", newline="") as f:
        f.writelines(lines)
    os.replace(tmp, path)
    return path


HARMONY_ARCHITECTURES = ("gpt_oss",)


def served_vocab(arch: str, tokenizer) -> Optional[str]:
    """The directory of the o200k vocabulary file (``vocab_file``) of a model whose chat
    format is harmony (gpt-oss), written once from its own tokenizer into a new
    temporary directory; None for another architecture. ValueError naming the model when
    its vocabulary is not o200k's (openai-harmony's hash check) or too short; ImportError
    without openai-harmony (the ``server`` extra)."""
    if arch not in HARMONY_ARCHITECTURES:
        return None
    import tempfile

    vocab = tokenizer.backend.get_vocab(with_added_tokens=False)
    tokens = [None] * len(vocab)
    for token, i in vocab.items():
        if i < len(tokens):
            tokens[i] = token
    directory = tempfile.mkdtemp(prefix="metalrt-harmony-")
    vocab_file([t if t is not None else "" for t in tokens], directory)
    try:
        encoding(directory)
    except ValueError as e:
        raise ValueError(f"[harmony] the {arch} model's vocabulary is not o200k's, which its "
                         f"harmony chat format needs: {e}") from None
    return directory


@lru_cache(maxsize=1)
def encoding(directory: str):
    """openai-harmony's gpt-oss encoding, its vocabulary read from ``directory`` (see
    ``vocab_file``). ValueError naming the directory when the file is missing or is
    not o200k's (openai-harmony's hash check); ImportError without openai-harmony."""
    import openai_harmony

    os.environ[ENCODINGS_VAR] = directory   # read by openai-harmony's loader only
    try:
        return openai_harmony.load_harmony_encoding(
            openai_harmony.HarmonyEncodingName.HARMONY_GPT_OSS)
    except openai_harmony.HarmonyError as e:
        raise ValueError(f"[harmony] {os.path.join(directory, VOCAB_NAME)} cannot be "
                         f"used: {e}") from None


REASONING_EFFORTS = ("low", "medium", "high")


def render(messages: Sequence[dict], tools: Sequence[dict], directory: str,
           reasoning_effort: str = "medium") -> List[int]:
    """The token ids of a chat prompt in harmony format, rendered by openai-harmony:
    the system message (``reasoning_effort``), a developer message holding the
    request's system/developer text as instructions and ``tools`` (OpenAI tool objects)
    as function tools, then the turns: user text; assistant text (``final``),
    ``tool_calls`` (``commentary`` to ``functions.NAME``, JSON arguments); ``tool``
    results (from ``functions.NAME``, the call its ``tool_call_id`` names), ending in
    ``<|start|>assistant``. ``messages``: dicts with role, content (text) and, as the
    chat templates read them, tool_calls (arguments as objects) / tool_call_id.
    ValueError for an unknown reasoning effort or role, or a tool message whose call id
    no earlier call has."""
    from openai_harmony import (Author, Conversation, DeveloperContent, Message,
                                ReasoningEffort, Role, SystemContent, ToolDescription)

    if reasoning_effort not in REASONING_EFFORTS:
        raise ValueError(f"[harmony] reasoning_effort must be one of {REASONING_EFFORTS}, got "
                         f"{reasoning_effort!r}")
    system = SystemContent.new().with_reasoning_effort(ReasoningEffort(reasoning_effort.capitalize()))
    instructions = "\n\n".join(m["content"] for m in messages
                                if m["role"] in ("system", "developer") and m["content"])
    developer = DeveloperContent.new()
    if instructions:
        developer = developer.with_instructions(instructions)
    if tools:
        developer = developer.with_function_tools([ToolDescription.new(
            t["function"]["name"], t["function"].get("description") or "",
            parameters=t["function"].get("parameters")) for t in tools])
    turns = [Message.from_role_and_content(Role.SYSTEM, system)]
    if instructions or tools:
        turns.append(Message.from_role_and_content(Role.DEVELOPER, developer))
    names = {}
    for m in messages:
        role, text = m["role"], m["content"] or ""
        if role in ("system", "developer"):
            continue
        if role == "user":
            turns.append(Message.from_role_and_content(Role.USER, text))
        elif role == "assistant":
            if text:
                turns.append(Message.from_role_and_content(Role.ASSISTANT, text)
                             .with_channel("final"))
            for call in m.get("tool_calls") or ():
                names[call["id"]] = name = call["function"]["name"]
                arguments = call["function"]["arguments"]
                turns.append(Message.from_role_and_content(
                    Role.ASSISTANT, arguments if isinstance(arguments, str) else json.dumps(arguments))
                    .with_channel("commentary").with_recipient(f"functions.{name}")
                    .with_content_type("<|constrain|>json"))
        elif role == "tool":
            name = names.get(m.get("tool_call_id"))
            if name is None:
                raise ValueError(f"[harmony] the tool message's tool_call_id "
                                 f"{m.get('tool_call_id')!r} names no earlier tool call")
            turns.append(Message.from_author_and_content(Author.new(Role.TOOL, f"functions.{name}"),
                                                         text)
                         .with_channel("commentary").with_recipient("assistant"))
        else:
            raise ValueError(f"[harmony] unknown message role {role!r}")
    return list(encoding(directory).render_conversation_for_completion(
        Conversation.from_messages(turns), Role.ASSISTANT))


def _messages(completion: str, directory: str, unfinished_calls: bool):
    """(channel, recipient, text) of each message of ``completion``: the finished ones,
    then the unfinished last one unless it is addressed to a recipient and
    ``unfinished_calls`` is False (a call's arguments mean nothing before it ends). Text
    past what the harmony parser accepts (a model that left the format) is a last
    message on no channel."""
    from openai_harmony import HarmonyError, Role, StreamableParser

    enc = encoding(directory)
    parser = StreamableParser(enc, Role.ASSISTANT)
    tokens = enc.encode(completion, allowed_special="all")
    rest = None
    for i, token in enumerate(tokens):
        try:
            parser.process(token)
        except HarmonyError:
            rest = enc.decode(tokens[i:])
            break
    messages = [(m.channel, m.recipient, "".join(part.text for part in m.content))
                for m in parser.messages]
    if parser.current_content and (unfinished_calls or not parser.current_recipient):
        messages.append((parser.current_channel, parser.current_recipient,
                         parser.current_content))
    if rest:
        messages.append((None, None, rest))
    return messages


def parse(completion: str, directory: str, tools: Optional[Dict[str, dict]] = None,
          unfinished_calls: bool = True, cut: bool = False) -> Tuple[str, str, List[ToolCall]]:
    """(reasoning, content, tool calls) of an assistant completion in harmony format.
    A call to a function not in ``tools`` (when given) or with arguments that are not
    a JSON object stays in the content as the model wrote it. A completion cut before
    its message ended (max_tokens) keeps what it had (without an unfinished call when
    ``unfinished_calls`` is False: what a stream has decided so far); ``cut``: it was,
    and its last message, when a call, is a call with the arguments written so far (as
    OpenAI returns a call cut by the length limit)."""
    reasoning, content, calls = [], [], []
    messages = _messages(completion, directory, unfinished_calls)
    for i, (channel, recipient, text) in enumerate(messages):
        name = recipient[len("functions."):] if recipient and \
            recipient.startswith("functions.") else None
        call = _call(name, text, tools) if name else None
        if name and call is None and cut and i == len(messages) - 1:
            call = ToolCall(name, text)
        if call is not None:
            calls.append(call)
        elif channel == "analysis":
            reasoning.append(text)
        else:
            content.append(text)
    return "".join(reasoning), "".join(content), calls


def _call(name: str, arguments: str, tools: Optional[Dict[str, dict]]) -> Optional[ToolCall]:
    if tools is not None and name not in tools:
        return None
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    return ToolCall(name, json.dumps(value, ensure_ascii=False)) \
        if isinstance(value, dict) else None


class HarmonyOutput:
    """A harmony reply's text, as it streams, split into OpenAI's message fields
    (``chat_output.ChatOutput``'s interface): ``feed(text)`` and ``finish()`` return the
    deltas (``reasoning_content``, ``content``, ``tool_calls`` in OpenAI's streamed form)
    that the text adds to ``parse``'s split of the whole reply, so the deltas reassemble
    into the non-streamed message. A call is sent once its message has ended."""

    def __init__(self, directory: str, tools: Dict[str, dict]):
        self.directory, self.tools, self.text = directory, tools, ""
        self.sent = {"reasoning_content": 0, "content": 0}
        self.calls: List[ToolCall] = []

    def feed(self, piece: str) -> List[dict]:
        self.text += piece
        return self._deltas(unfinished_calls=False)

    def finish(self, cut: bool = False) -> List[dict]:
        return self._deltas(unfinished_calls=True, cut=cut)

    def _deltas(self, unfinished_calls: bool, cut: bool = False) -> List[dict]:
        reasoning, content, calls = parse(self.text, self.directory, self.tools or None,
                                          unfinished_calls, cut)
        deltas = []
        for key, text in (("reasoning_content", reasoning), ("content", content)):
            if len(text) > self.sent[key]:
                deltas.append({key: text[self.sent[key]:]})
                self.sent[key] = len(text)
        for call in calls[len(self.calls):]:
            deltas += call_deltas(len(self.calls), call)
            self.calls.append(call)
        return deltas


def call_grammar(tools: Dict[str, dict], parallel: bool) -> str:
    """The llguidance Lark grammar of a forced reply of calls in harmony's syntax:
    ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>``,
    ARGS a JSON object valid for the function's parameters (one call; harmony ends the
    turn at ``<|call|>``, so ``parallel`` adds nothing)."""
    from .grammar import styled

    rules = [f'call_{i}: "commentary to=functions.{name} " <|constrain|> "json" <|message|> '
             f'%json {json.dumps(styled(params or {"type": "object"}))}'
             for i, (name, params) in enumerate(tools.items())]
    calls = " | ".join(f"call_{i}" for i in range(len(tools)))
    return "\n".join([f"start: <|channel|> ({calls}) <|call|>", *rules])


def final_grammar(schema: dict) -> str:
    """The llguidance Lark grammar of a harmony reply whose answer is JSON valid for
    ``schema`` (``response_format``): optionally an ``analysis`` message of free text
    (the model's reasoning), then the ``final`` message, the JSON document, ending the
    turn with ``<|return|>``. Special tokens are only where the grammar names them, so
    the reasoning cannot open another channel."""
    from .grammar import lark_json

    return "\n".join([
        'start: analysis? <|channel|> "final" <|message|> answer <|return|>',
        'analysis: <|channel|> "analysis" <|message|> thought <|end|> <|start|> "assistant"',
        r"thought: /(.|\n)*/",
        f"answer: {lark_json(schema)}"])


class _CallSyntax:
    """Harmony's calls where the server asks a tool parser for a forced call's grammar."""

    grammar = staticmethod(call_grammar)


CALL_SYNTAX = _CallSyntax()
