"""The server's reply splitter on known model outputs: tool calls in each format
(whole and streamed in pieces of every size), <think> reasoning, held-back markers,
parser choice from a template, and each format's forced-call grammar accepting the
model's own syntax (llguidance, on the default model's tokenizer)."""
import json

import pytest

from metalrt.server.chat_output import ChatOutput, message
from metalrt.server.tool_parsers import PARSERS, parser_for

TOOLS = {"get_weather": {"type": "object",
                         "properties": {"city": {"type": "string"},
                                        "days": {"type": "integer"}},
                         "required": ["city"]}}

# (parser, model output, content, [(name, arguments)])
CASES = [
    ("hermes", 'Let me check.<tool_call>\n{"name": "get_weather", "arguments": '
               '{"city": "Paris", "days": 2}}\n</tool_call>',
     "Let me check.", [("get_weather", {"city": "Paris", "days": 2})]),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "A"}}\n</tool_call>\n'
               '<tool_call>\n{"name": "get_weather", "arguments": {"city": "B"}}\n</tool_call>',
     None, [("get_weather", {"city": "A"}), ("get_weather", {"city": "B"})]),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "a</tool_call>b"}}'
               '\n</tool_call>', None, [("get_weather", {"city": "a</tool_call>b"})]),
    ("hermes", "No tools needed: 2 < 3.", "No tools needed: 2 < 3.", []),
    ("hermes", "<tool_call>\nnot json\n</tool_call>", "<tool_call>\nnot json\n</tool_call>", []),
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Jose, CA\n"
                    "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
     None, [("get_weather", {"city": "San Jose, CA", "days": 3})]),
    ("llama3_json", '{"name": "get_weather", "parameters": {"city": "Oslo"}}',
     None, [("get_weather", {"city": "Oslo"})]),
    ("llama3_json", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "A"}}; '
                    '{"name": "get_weather", "parameters": {"city": "B"}}',
     None, [("get_weather", {"city": "A"}), ("get_weather", {"city": "B"})]),
    ("llama3_json", "Hello {there}", "Hello {there}", []),
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Rome"}}]',
     None, [("get_weather", {"city": "Rome"})]),
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}[TOOL_CALLS]get_weather[ARGS]'
                '{"city": "Nice"}',
     None, [("get_weather", {"city": "Rome"}), ("get_weather", {"city": "Nice"})]),
]


def split(parser, text, size, reasoning=False, thinking=False):
    out = ChatOutput(PARSERS[parser] if parser else None, TOOLS, reasoning, thinking)
    deltas = []
    for i in range(0, len(text), size):
        deltas += out.feed(text[i:i + size])
    return deltas + out.finish()


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
@pytest.mark.parametrize("parser, text, content, calls", CASES)
def test_tool_calls_parse_whole_and_streamed(parser, text, content, calls, size):
    msg = message(split(parser, text, size))
    assert msg["content"] == content
    got = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
           for c in msg.get("tool_calls", [])]
    assert got == calls
    assert all(c["id"].startswith("call_") for c in msg.get("tool_calls", []))


def test_a_hermes_call_is_streamed_once_it_closes():
    out = ChatOutput(PARSERS["hermes"], TOOLS, False)
    assert out.feed("Sure<tool") == [{"content": "Sure"}]   # "<tool" held back
    assert out.feed('_call>\n{"name": "get_weather", "arguments": {"city": "X"}}') == []
    deltas = out.feed("\n</tool_call>")
    assert [list(d["tool_calls"][0]) for d in deltas] == [["index", "id", "type", "function"],
                                                         ["index", "function"]]
    assert out.finish() == []


@pytest.mark.parametrize("size", [1, 4, 1000])
def test_think_is_reasoning_content(size):
    text = "<think>\nThe user greets; answer briefly.\n</think>\n\nHello!"
    msg = message(split(None, text, size, reasoning=True))
    assert msg == {"role": "assistant", "content": "Hello!",
                   "reasoning_content": "The user greets; answer briefly.\n"}
    # The template opened <think> in the prompt: the reply starts inside it.
    msg = message(split(None, "step 1 < step 2</think>Done", size, reasoning=True, thinking=True))
    assert msg["reasoning_content"] == "step 1 < step 2" and msg["content"] == "Done"
    # reasoning off (--reasoning-format none): everything is content.
    assert message(split(None, text, size))["content"] == text


def test_reasoning_then_a_tool_call():
    text = ('<think>need weather</think><tool_call>\n{"name": "get_weather", '
            '"arguments": {"city": "Lima"}}\n</tool_call>')
    msg = message(split("hermes", text, 5, reasoning=True))
    assert msg["reasoning_content"] == "need weather" and msg["content"] is None
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"city": "Lima"}


@pytest.mark.parametrize("template, name", [
    ("{% for tool in tools %}<tool_call>{% endfor %}", "hermes"),
    ("<function=x><parameter=y>{{ tools }}", "qwen3_coder"),
    ("<|start_header_id|>ipython{{ '<|python_tag|>' }}", "llama3_json"),
    ("[AVAILABLE_TOOLS]{{ tools }}[TOOL_CALLS]", "mistral"),
    ("{{ messages }}", "hermes"),
    (None, "hermes"),
])
def test_parser_from_template(template, name):
    assert parser_for(template).name == name


@pytest.mark.parametrize("parser, text", [(p, t) for p, t, _, calls in CASES if calls])
def test_forced_call_grammar_accepts_the_format(parser, text):
    import llguidance

    from metalrt.loaders import load_model_files

    tokenizer = load_model_files().tokenizer
    lltok = llguidance.LLTokenizer(tokenizer.backend.to_str(), n_vocab=tokenizer.vocab_size,
                                   eos_token=list(tokenizer.eos_token_ids))
    # The grammar's own spelling of the calls: compact JSON, one call per block.
    calls = message(split(parser, text, 1000))["tool_calls"]
    rendered = {
        "hermes": "".join('<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>\n'
                          % (c["function"]["name"], c["function"]["arguments"]) for c in calls),
        "qwen3_coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Jose, CA\n"
                       "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n"
                       "</tool_call>\n",
        "llama3_json": "; ".join('{"name": "%s", "parameters": %s}'
                                 % (c["function"]["name"], c["function"]["arguments"])
                                 for c in calls),
        "mistral": "[TOOL_CALLS][" + ", ".join('{"name": "%s", "arguments": %s}'
                                               % (c["function"]["name"], c["function"]["arguments"])
                                               for c in calls) + "]",
    }[parser]
    grammar = PARSERS[parser].grammar(TOOLS, parallel=True)
    assert llguidance.LLMatcher.validate_grammar(grammar) == ""
    matcher = llguidance.LLMatcher(lltok, grammar, log_level=0)
    ids = tokenizer.encode(rendered, add_special_tokens=False)
    assert matcher.try_consume_tokens(ids) == len(ids), matcher.get_error()
    assert matcher.is_accepting()
    assert message(split(parser, rendered, 1000))["tool_calls"] is not None


# (parser, a reply cut by max_tokens, [(name, arguments text)]): the whole calls, then
# the cut one with the arguments written so far.
CUT = [
    ("hermes", 'Sure.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa',
     [("get_weather", '{"city": "Pa')]),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "A"}}\n</tool_call>\n'
               '<tool_call>\n{"name": "get_weather", "arguments": {"ci',
     [("get_weather", '{"city": "A"}'), ("get_weather", '{"ci')]),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "A"}}\n</tool_',
     [("get_weather", '{"city": "A"}')]),
    ("hermes", '<tool_call>\n{"name": "get_wea', []),
    ("llama3_json", '{"name": "get_weather", "parameters": {"city": "A"}}; '
                    '{"name": "get_weather", "parameters": {"days": 2',
     [("get_weather", '{"city": "A"}'), ("get_weather", '{"days": 2')]),
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "A"}}, '
                '{"name": "get_weather", "arguments": {"ci',
     [("get_weather", '{"city": "A"}'), ("get_weather", '{"ci')]),
    ("llama3_json", '{"na', []),
    ("llama3_json", '{"answer": 4', "content"),   # JSON that is no call stays content
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                    "</parameter>\n<parameter=days>\n3",
     [("get_weather", '{"city": "Paris"')]),
]


@pytest.mark.parametrize("parser, text, calls", CUT)
def test_a_reply_cut_in_a_call_is_a_partial_call_not_content(parser, text, calls):
    """OpenAI's behaviour for a call cut by max_tokens: the call with the arguments
    written so far; the call syntax never reaches content."""
    split = ChatOutput(PARSERS[parser], TOOLS, False)
    reply = message(split.feed(text) + split.finish(cut=True))
    if calls == "content":
        assert reply == {"role": "assistant", "content": text}
        return
    assert (reply["content"] or "") == ("Sure." if text.startswith("Sure.") else "")
    assert [(c["function"]["name"], c["function"]["arguments"])
            for c in reply.get("tool_calls", ())] == calls
