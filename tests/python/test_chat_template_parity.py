"""Chat-template parity: the released templates of the families metalrt runs render
exactly as transformers' ``apply_chat_template`` renders them, for system prompts,
multi-turn chats, tools with tool calls and tool results, and template keywords
(``enable_thinking``); where transformers' rendering raises, metalrt's raises ValueError.

The templates are the models' own, as llama.cpp keeps them (chat_templates.py); each
is paired with its model's bos/eos token text, which the templates print.
"""
from __future__ import annotations

import copy

import chat_templates
import pytest
import tokenizers
from metalrt.tokenizer import Tokenizer

LLAMA3 = ("<|begin_of_text|>", "<|eot_id|>")
CHATML = (None, "<|im_end|>")
MISTRAL = ("<s>", "</s>")
DEEPSEEK = ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>")
# llama.cpp's template file -> (bos, eos) of the model's tokenizer_config.json.
TEMPLATES = {
    "meta-llama-Llama-3.1-8B-Instruct": LLAMA3,
    "meta-llama-Llama-3.2-3B-Instruct": LLAMA3,
    "meta-llama-Llama-3.3-70B-Instruct": LLAMA3,
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("<|begin_of_text|>", "<|im_end|>"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": DEEPSEEK,
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": DEEPSEEK,
    "Qwen-Qwen2.5-7B-Instruct": CHATML,
    "Qwen-QwQ-32B": CHATML,
    "Qwen-Qwen3-0.6B": CHATML,
    "Qwen3-Coder": CHATML,
    "Qwen3.5-4B": CHATML,
    "openai-gpt-oss-120b": ("<|startoftext|>", "<|return|>"),
    "microsoft-Phi-3.5-mini-instruct": ("<s>", "<|endoftext|>"),
    "mistralai-Mistral-Nemo-Instruct-2407": MISTRAL,
    "Mistral-Small-3.2-24B-Instruct-2506": MISTRAL,
    "unsloth-mistral-Devstral-Small-2507": MISTRAL,
    "google-gemma-2-2b-it": ("<bos>", "<eos>"),
}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather of a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
SYSTEM = {"role": "system", "content": "You are terse. Answer in one line."}
USER = {"role": "user", "content": "Bonjour, ça va? <b>bold</b>"}
# (name, messages, keywords of apply_chat_template)
CHATS = [
    ("user", [USER], {}),
    ("system+user", [SYSTEM, USER], {}),
    ("multi-turn", [SYSTEM, USER, {"role": "assistant", "content": "Oui."},
                    {"role": "user", "content": "And 2+2?"}], {}),
    ("ends with assistant", [USER, {"role": "assistant", "content": "Oui, merci."}],
     {"add_generation_prompt": False}),
    ("tools offered", [SYSTEM, {"role": "user", "content": "Weather in Paris?"}],
     {"tools": [WEATHER]}),
    # Mistral's templates take only 9-character alphanumeric call ids.
    ("tool call and result", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "a1B2c3D4e", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "a1B2c3D4e", "name": "get_weather",
         "content": "{\"temperature\": 21}"}], {"tools": [WEATHER]}),
    ("thinking off", [USER], {"enable_thinking": False}),
]


def _backend(bos, eos) -> tokenizers.Tokenizer:
    words = {"[UNK]": 0, "hello": 1}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="[UNK]"))
    backend.add_special_tokens([t for t in (bos, eos) if t])
    return backend


def _pair(name):
    from transformers import PreTrainedTokenizerFast

    bos, eos = TEMPLATES[name]
    text = chat_templates.template(name)
    backend = _backend(bos, eos)
    ours = Tokenizer(backend, bos_token_id=backend.token_to_id(bos) if bos else None,
                     eos_token_ids=[backend.token_to_id(eos)], chat_template=text)
    theirs = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=bos, eos_token=eos,
                                     chat_template=text)
    return ours, theirs


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_released_template_renders_as_transformers(name):
    ours, theirs = _pair(name)
    rendered = 0
    for chat, messages, keywords in CHATS:
        keywords = {"add_generation_prompt": True, **keywords}
        try:
            expected = theirs.apply_chat_template(copy.deepcopy(messages), tokenize=False,
                                                  **copy.deepcopy(keywords))
        except Exception as e:   # noqa: BLE001 - jinja2's and transformers' own errors
            with pytest.raises(ValueError, match=r"\[apply_chat_template\]"):
                ours.apply_chat_template(copy.deepcopy(messages), **copy.deepcopy(keywords))
            print(f"{name} / {chat}: both raise ({type(e).__name__})")
            continue
        got = ours.apply_chat_template(copy.deepcopy(messages), **copy.deepcopy(keywords))
        assert got == expected, f"{name} / {chat}"
        rendered += 1
    # A template that raised on every chat would compare nothing (Hermes' tool-use
    # template renders only the chats that offer tools, Gemma's none with a system turn).
    assert rendered >= 2, name
