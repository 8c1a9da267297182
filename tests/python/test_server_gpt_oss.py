"""gpt-oss behind ``metalrt serve`` (loopback, the official ``openai`` client): a tiny
random-weight ``GptOssForCausalLM`` with the o200k vocabulary and gpt-oss's harmony
special tokens (``harmony_vocab``), whose prompts the server renders with openai-harmony
and whose replies it parses into ``reasoning_content`` / ``content`` / ``tool_calls``.

The weights are random, so the gates force what they parse: a named ``tool_choice``
constrains the reply to harmony's call syntax (``harmony.call_grammar``), whose arguments
must validate against the function's parameters, streamed and not; a free reply is
whatever the model says, and its message must be ``harmony.parse``'s split of the raw
completion text the same server returns from ``/v1/completions``. The streaming splitter
is also fed a rendered reply token by token here."""
import json

import jsonschema
import pytest
import tokenizers
import torch  # test dependency (the "test" extra)

import harmony_vocab
from metalrt.server import harmony
from metalrt.server.launch import ServerProcess, free_port, metalrt_command

VOCAB = 201_088   # gpt-oss's embedding rows (o200k, its specials and reserved ids)
SPECIALS = {"<|startoftext|>": 199998, "<|endoftext|>": 199999, "<|return|>": 200002,
            "<|constrain|>": 200003, "<|channel|>": 200005, "<|start|>": 200006,
            "<|end|>": 200007, "<|message|>": 200008, "<|call|>": 200012}
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                           "parameters": WEATHER}}]


def o200k_tokens():
    """o200k's ordinary tokens as byte-level strings (rank = id)."""
    import base64

    char_of = {b: c for c, b in harmony._byte_of_char().items()}
    return ["".join(char_of[b] for b in base64.b64decode(line.split(" ")[0]))
            for line in harmony_vocab.path().read_text().splitlines()]


def save_tokenizer(directory):
    """tokenizer.json: o200k's vocabulary byte-level, gpt-oss's special tokens at their
    ids and ``<|reserved_N|>`` at the others up to the embedding's rows. No merges: the server renders harmony prompts to ids itself and only decodes
    (and llguidance reads the token bytes), so encoding is never on the gate's path."""
    vocab = {t: i for i, t in enumerate(o200k_tokens())}
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    named = {i: t for t, i in SPECIALS.items()}
    specials = [(named.get(i, f"<|reserved_{i}|>"), i) for i in range(min(named), VOCAB)]
    data = json.loads(tok.to_str())
    data["added_tokens"] = [{"id": i, "content": t, "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True}
                            for t, i in specials]
    with open(f"{directory}/tokenizer.json", "w") as f:
        json.dump(data, f)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import transformers as tf

    cfg = tf.GptOssConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=32,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                          sliding_window=8, bos_token_id=None, pad_token_id=199999,
                          eos_token_id=[200002, 199999, 200012])
    torch.manual_seed(7)
    model = tf.GptOssForCausalLM(cfg).eval()
    directory = str(tmp_path_factory.mktemp("gpt_oss_server"))
    model.save_pretrained(directory, safe_serialization=True)
    save_tokenizer(directory)
    port = free_port()
    process = ServerProcess(metalrt_command(port, "--model", directory, "--device", "cpu",
                                            "--log-level", "warning"), port, 300)
    yield process
    process.close()


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0,
                         http_client=openai.DefaultHttpxClient(trust_env=False, timeout=120))


def ask(client, server, max_tokens=40, **kw):
    return client.chat.completions.create(
        model=server.model, messages=[{"role": "system", "content": "Answer briefly."},
                                      {"role": "user", "content": "Weather in Paris?"}],
        max_tokens=max_tokens, temperature=0, **kw)


# Without merges a forced call is spelled in byte tokens: ~45 for the header alone.
CALL_TOKENS = 200


def test_named_tool_choice_is_a_harmony_call(client, server):
    reply = ask(client, server, CALL_TOKENS, tools=TOOLS,
                tool_choice={"type": "function", "function": {"name": "get_weather"}})
    message = reply.choices[0].message
    assert [c.function.name for c in message.tool_calls] == ["get_weather"]
    jsonschema.validate(json.loads(message.tool_calls[0].function.arguments), WEATHER)
    assert reply.choices[0].finish_reason in ("tool_calls", "stop")
    # The same request streamed: the deltas reassemble into the same call.
    stream = ask(client, server, CALL_TOKENS, tools=TOOLS, stream=True,
                 tool_choice={"type": "function", "function": {"name": "get_weather"}})
    calls = {}
    for chunk in stream:
        for delta in chunk.choices[0].delta.tool_calls or ():
            call = calls.setdefault(delta.index, {"name": "", "arguments": ""})
            call["name"] += delta.function.name or ""
            call["arguments"] += delta.function.arguments or ""
    assert calls == {0: {"name": "get_weather",
                         "arguments": message.tool_calls[0].function.arguments}}


def test_free_reply_is_the_harmony_split_of_its_text(client, server, vocab_directory):
    """The message of a free (random) greedy reply is ``harmony.parse`` of its raw text:
    the prompt openai-harmony renders, continued greedily by /v1/completions."""
    reply = ask(client, server).choices[0].message
    directory = vocab_directory
    rendered = harmony.render([{"role": "system", "content": "Answer briefly."},
                               {"role": "user", "content": "Weather in Paris?"}], [], directory)
    raw = client.completions.create(model=server.model, prompt=rendered, max_tokens=40,
                                    temperature=0).choices[0].text
    assert raw   # the model said something
    reasoning, content, calls = harmony.parse(raw, directory)
    assert (reply.content or "") == content and not calls
    assert (getattr(reply, "reasoning_content", None) or "") == reasoning


@pytest.fixture(scope="module")
def vocab_directory(tmp_path_factory):
    return harmony.vocab_file(o200k_tokens(), str(tmp_path_factory.mktemp("o200k")))[
        :-len("/" + harmony.VOCAB_NAME)]


def test_streaming_splitter_reassembles_a_rendered_reply(vocab_directory):
    """``HarmonyOutput`` fed one token's text at a time gives deltas that reassemble into
    ``parse``'s split: reasoning (analysis), a commentary call, then the final answer."""
    from openai_harmony import Conversation, Message, Role

    directory = vocab_directory
    enc = harmony.encoding(directory)
    messages = [Message.from_role_and_content(Role.ASSISTANT, "Need the weather.").with_channel("analysis"),
                Message.from_role_and_content(Role.ASSISTANT, '{"city": "Paris", "unit": "celsius"}')
                .with_channel("commentary").with_recipient("functions.get_weather")
                .with_content_type("<|constrain|>json")]
    tokens = enc.render_conversation(Conversation.from_messages(messages))
    # The completion after the prompt's "<|start|>assistant".
    text = enc.decode(tokens)[len("<|start|>assistant"):]
    pieces = [enc.decode([t]) for t in enc.encode(text, allowed_special="all")]
    split = harmony.HarmonyOutput(directory, {"get_weather": WEATHER})
    deltas = [d for piece in pieces for d in split.feed(piece)] + split.finish()
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    arguments = "".join(p["function"]["arguments"] for d in deltas for p in d.get("tool_calls", ()))
    assert reasoning == "Need the weather."
    assert json.loads(arguments) == {"city": "Paris", "unit": "celsius"}
    assert not "".join(d.get("content", "") for d in deltas)
    # No call delta before the call's message ended (its closing token is the last piece).
    first_call = next(i for i, d in enumerate(deltas) if "tool_calls" in d)
    assert first_call >= len([d for d in deltas if "reasoning_content" in d])
    assert len(split.calls) == 1


ANSWER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                           "warm": {"type": "boolean"}},
          "required": ["city", "warm"], "additionalProperties": False}


def test_response_format_is_enforced_in_the_final_channel(client, server):
    """A JSON schema holds for the final channel's text (the content); the analysis
    channel before it stays free reasoning. Before, harmony models ignored it. The random
    model would reason until max_tokens: a bias on <|end|> ends its analysis at once (the
    grammar allows <|end|> only there)."""
    for stream in (False, True):
        kwargs = dict(response_format={"type": "json_schema", "json_schema": {
            "name": "answer", "schema": ANSWER}}, logit_bias={SPECIALS["<|end|>"]: 100})
        if not stream:
            reply = ask(client, server, CALL_TOKENS, **kwargs).choices[0]
            content, reason = reply.message.content, reply.finish_reason
        else:
            chunks = list(ask(client, server, CALL_TOKENS, stream=True, **kwargs))
            content = "".join(c.choices[0].delta.content or "" for c in chunks)
            reason = chunks[-1].choices[0].finish_reason
        assert reason == "stop", (content, reason)
        jsonschema.validate(json.loads(content), ANSWER)


def test_a_forced_call_cut_by_max_tokens_is_a_partial_call(client, server):
    """Cut inside its arguments, a forced call is a tool call whose arguments are the
    JSON text so far, finish_reason "length" (OpenAI's behaviour), nothing in content."""
    full = ask(client, server, CALL_TOKENS, tools=TOOLS,
               tool_choice={"type": "function", "function": {"name": "get_weather"}})
    arguments = full.choices[0].message.tool_calls[0].function.arguments
    cut = ask(client, server, full.usage.completion_tokens - 4, tools=TOOLS,
              tool_choice={"type": "function", "function": {"name": "get_weather"}}).choices[0]
    assert cut.finish_reason == "length"
    assert not cut.message.content
    (call,) = cut.message.tool_calls
    assert call.function.name == "get_weather"
    assert call.function.arguments and arguments.startswith(call.function.arguments)
    assert call.function.arguments != arguments
