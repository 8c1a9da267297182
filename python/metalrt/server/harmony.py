"""gpt-oss's harmony format through ``openai-harmony`` (PyPI), offline.

openai-harmony tokenizes with the o200k vocabulary, which it downloads at first use
unless ``TIKTOKEN_ENCODINGS_BASE`` names a directory holding ``o200k_base.tiktoken``
(it then reads that file and checks its sha256 against the published one). A served
gpt-oss model carries the same vocabulary in its own tokenizer (``tokenizer.json`` or
the GGUF's token list, as GPT-2 byte-level strings, rank = id), so ``vocab_file``
writes the tiktoken file from it: nothing is downloaded, and a vocabulary that is not
o200k's is refused by openai-harmony's hash check.

``parse`` splits a completion (the text after the prompt's ``<|start|>assistant``,
special tokens kept) into reasoning (the ``analysis`` channel), content (``final``) and
tool calls (``commentary`` messages to ``functions.NAME``).
"""
from __future__ import annotations

import base64
import json
import os
from functools import lru_cache
from typing import Dict, List, Optional, Sequence, Tuple

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


def parse(completion: str, directory: str,
          tools: Optional[Dict[str, dict]] = None) -> Tuple[str, str, List[ToolCall]]:
    """(reasoning, content, tool calls) of an assistant completion in harmony format.
    A call to a function not in ``tools`` (when given) or with arguments that are not
    a JSON object stays in the content as the model wrote it. A completion cut before
    its message ended (max_tokens) keeps what it had."""
    from openai_harmony import Role, StreamableParser

    enc = encoding(directory)
    parser = StreamableParser(enc, Role.ASSISTANT)
    for token in enc.encode(completion, allowed_special="all"):
        parser.process(token)
    messages = list(parser.messages)
    if parser.current_content:   # an unfinished last message
        messages.append((parser.current_channel, parser.current_recipient,
                         parser.current_content))
    reasoning, content, calls = [], [], []
    for message in messages:
        if isinstance(message, tuple):
            channel, recipient, text = message
        else:
            channel, recipient = message.channel, message.recipient
            text = "".join(part.text for part in message.content)
        name = recipient[len("functions."):] if recipient and \
            recipient.startswith("functions.") else None
        call = _call(name, text, tools) if name else None
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
