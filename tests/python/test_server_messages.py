"""``metalrt serve``'s Anthropic Messages API (``POST /v1/messages``) through the official
``anthropic`` client on loopback: the text equals the chat endpoint's greedy output,
streams reassemble with the client's helpers into the non-streamed message, forced
tool_use blocks validate against their input_schema, tool_result follow-ups, the stop
reasons (max_tokens, stop_sequence, end_turn, tool_use), thinking blocks on a
``<think>`` template, ``messages.count_tokens`` counting the rendered prompt (system and
tools included) as ``messages.create`` reports it, and bad input answered in Anthropic's
error shape while the server keeps serving."""
import json

import anthropic
import jsonschema
import pytest

import metalrt

from server_process import MODEL_ID, ServerProcess
from test_server_agents import THINK_TEMPLATE

KEY = "sk-local-test"
WEATHER = {"name": "get_weather", "description": "The weather of a city",
           "input_schema": {"type": "object",
                            "properties": {"city": {"type": "string", "maxLength": 30},
                                           "unit": {"enum": ["celsius", "fahrenheit"]}},
                            "required": ["city", "unit"], "additionalProperties": False}}
TIME = {"name": "get_time", "input_schema": {"type": "object", "properties": {}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
SYSTEM = "You are a helpful assistant. Answer briefly."
# The newest client has no sampling arguments (the API's current models fix them); the
# server still takes temperature/top_p/top_k, which older clients and agents send.
GREEDY = {"extra_body": {"temperature": 0}}


def _client(server, **auth) -> anthropic.Anthropic:
    http = anthropic.DefaultHttpxClient(trust_env=False, timeout=120)
    return anthropic.Anthropic(base_url=server.url, max_retries=0, http_client=http,
                               **(auth or {"api_key": KEY}))


@pytest.fixture(scope="module")
def server():
    process = ServerProcess("--kv-cache-tokens", "8192", api_key=KEY)
    yield process
    process.close()


@pytest.fixture(scope="module")
def client(server):
    return _client(server)


def _text(message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def _blocks(message) -> list:
    """The content blocks as dicts (the stream helper's blocks carry parsed_output)."""
    return [{k: v for k, v in b.to_dict().items() if k != "parsed_output"}
            for b in message.content]


def test_create_text_equals_the_chat_endpoints_greedy_output(server, client):
    question = [{"role": "user", "content": "Name three colours of the rainbow."}]
    chat = server.client(timeout=120).chat.completions.create(
        model=MODEL_ID, messages=[{"role": "system", "content": SYSTEM}] + question,
        max_tokens=24, temperature=0)
    message = client.messages.create(model=MODEL_ID, system=SYSTEM, messages=question,
                                     max_tokens=24, **GREEDY)
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_") and message.model == MODEL_ID
    assert [b.type for b in message.content] == ["text"]
    assert _text(message) == chat.choices[0].message.content and _text(message)
    assert message.stop_reason == {"length": "max_tokens",
                                   "stop": "end_turn"}[chat.choices[0].finish_reason]
    assert message.stop_sequence is None
    assert message.usage.output_tokens == chat.usage.completion_tokens
    assert (message.usage.input_tokens + message.usage.cache_read_input_tokens
            == chat.usage.prompt_tokens)
    # System text blocks are the same system prompt.
    blocks = client.messages.create(model=MODEL_ID, system=[{"type": "text", "text": SYSTEM}],
                                    messages=question, max_tokens=24, **GREEDY)
    assert _text(blocks) == _text(message)


def test_stream_reassembles_into_the_non_streamed_message(client):
    kwargs = dict(model=MODEL_ID, system=SYSTEM, max_tokens=32, **GREEDY,
                  messages=[{"role": "user", "content": "Write one sentence about the sea."}])
    whole = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 1 and "".join(pieces) == _text(whole)
    assert _blocks(final) == _blocks(whole)
    assert (final.stop_reason, final.stop_sequence) == (whole.stop_reason, whole.stop_sequence)
    assert final.usage.output_tokens == whole.usage.output_tokens
    raw = [e.type for e in client.messages.create(**kwargs, stream=True)]
    assert raw[:2] == ["message_start", "content_block_start"]
    assert raw[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(raw[2:-3]) == {"content_block_delta"}


def test_max_tokens_reached_is_the_stop_reason(client):
    message = client.messages.create(model=MODEL_ID, messages=ASK, max_tokens=3, **GREEDY)
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 3


def test_a_stop_sequence_ends_the_reply_and_is_named(client):
    kwargs = dict(model=MODEL_ID, messages=ASK, max_tokens=24, **GREEDY)
    free = _text(client.messages.create(**kwargs))
    word = free.split()[2]
    stopped = client.messages.create(**kwargs, stop_sequences=["@@never@@", word])
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == word
    assert _text(stopped) == free[:free.index(word)]   # the stop text left out


def test_a_named_tool_choice_gives_a_tool_use_block_that_validates(client):
    for sampling in (GREEDY, {}, {}, {}):   # greedy, then the default temperature 1
        message = client.messages.create(
            model=MODEL_ID, messages=ASK, tools=[WEATHER, TIME], max_tokens=100,
            tool_choice={"type": "tool", "name": "get_weather"}, **sampling)
        assert message.stop_reason == "tool_use", message.content
        (block,) = [b for b in message.content if b.type == "tool_use"]
        assert block.name == "get_weather" and block.id
        jsonschema.validate(block.input, WEATHER["input_schema"])


def test_a_streamed_tool_use_reassembles_into_the_non_streamed_one(client):
    kwargs = dict(model=MODEL_ID, messages=ASK, tools=[WEATHER], max_tokens=100, **GREEDY,
                  tool_choice={"type": "tool", "name": "get_weather"})
    whole = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert any(e.type == "input_json" for e in events)   # the helper saw partial_json
    assert final.stop_reason == whole.stop_reason == "tool_use"
    assert [b["type"] for b in _blocks(whole)] == ["tool_use"]
    assert [{**b, "id": ""} for b in _blocks(final)] == [{**b, "id": ""} for b in _blocks(whole)]


def test_a_tool_result_follow_up_is_accepted(client):
    call = client.messages.create(model=MODEL_ID, messages=ASK, tools=[WEATHER],
                                  max_tokens=100, **GREEDY,
                                  tool_choice={"type": "tool", "name": "get_weather"})
    (block,) = [b for b in call.content if b.type == "tool_use"]
    base = client.messages.create(model=MODEL_ID, messages=ASK, tools=[WEATHER], max_tokens=1)
    for result in ({"content": "18 C, sunny"},
                   {"content": [{"type": "text", "text": "no such city"}], "is_error": True}):
        reply = client.messages.create(
            model=MODEL_ID, tools=[WEATHER], max_tokens=8, **GREEDY,
            messages=ASK + [{"role": "assistant", "content": call.content},
                            {"role": "user", "content": [
                                {"type": "tool_result", "tool_use_id": block.id, **result}]}])
        assert reply.stop_reason in ("end_turn", "max_tokens")
        # The prompt held the call and its result.
        prompt = reply.usage.input_tokens + reply.usage.cache_read_input_tokens
        assert prompt > base.usage.input_tokens + base.usage.cache_read_input_tokens + 10


def test_count_tokens_counts_the_rendered_prompt_with_system_and_tools(client):
    _, tokenizer = metalrt.load(device="cpu")
    plain = client.messages.count_tokens(model=MODEL_ID, messages=ASK)
    assert isinstance(plain, anthropic.types.MessageTokensCount)
    system = client.messages.count_tokens(model=MODEL_ID, messages=ASK, system=SYSTEM)
    # SmolLM2's template puts a default system prompt where the request has none.
    for counted, messages in ((plain, ASK), (system, [{"role": "system", "content": SYSTEM},
                                                      *ASK])):
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        assert counted.input_tokens == len(tokenizer.encode(rendered, add_special_tokens=False))
    assert system.input_tokens != plain.input_tokens
    tools = client.messages.count_tokens(model=MODEL_ID, messages=ASK, system=SYSTEM,
                                         tools=[WEATHER, TIME])
    assert tools.input_tokens > system.input_tokens + 20     # the tools' descriptions
    # What the Messages endpoint reports as the prompt of the same request.
    for kwargs in ({}, {"system": SYSTEM}, {"system": SYSTEM, "tools": [WEATHER, TIME]}):
        usage = client.messages.create(model=MODEL_ID, messages=ASK, max_tokens=1,
                                       **kwargs).usage
        counted = client.messages.count_tokens(model=MODEL_ID, messages=ASK, **kwargs)
        assert counted.input_tokens == usage.input_tokens + usage.cache_read_input_tokens


@pytest.mark.parametrize("body, says", [
    ({"messages": []}, "messages"),
    ({"max_tokens": 4}, "max_tokens"),                  # a count has no reply settings
    ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, "nope"),
    ({"system": 3}, "system"),
])
def test_count_tokens_bad_input_is_a_400_in_anthropics_shape(client, body, says):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.post("/v1/messages/count_tokens", body={"model": MODEL_ID, "messages": ASK,
                                                        **body},
                    cast_to=anthropic.types.MessageTokensCount)
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert says in e.value.body["error"]["message"], e.value.body
    assert client.messages.count_tokens(model=MODEL_ID, messages=ASK).input_tokens > 5
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.count_tokens(model="not-this-model", messages=ASK)
    assert e.value.body["error"]["type"] == "not_found_error"


def _post(client, body: dict):
    return client.post("/v1/messages", body=body, cast_to=anthropic.types.Message)


@pytest.mark.parametrize("body, says", [
    ({"max_tokens": None}, "max_tokens"),
    ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, "nope"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "18 C"}]}]},
     "tool_use_id"),
    ({"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBORw0KGgo="}}]}]}, "image"),
    ({"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_nope", "content": "18 C"}]}]},
     "tool_use_id 'toolu_nope' answers no tool_use block"),
    ({"temperature": 1.5}, "temperature"),
    ({"messages": ASK + [{"role": "assistant", "content": "It is"}]}, "last message"),
])
def test_bad_input_is_a_400_in_anthropics_shape_and_the_server_keeps_serving(client, body,
                                                                             says):
    request = {"model": MODEL_ID, "messages": ASK, "max_tokens": 4, **body}
    request = {k: v for k, v in request.items() if v is not None}
    with pytest.raises(anthropic.BadRequestError) as e:
        _post(client, request)
    assert e.value.status_code == 400
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert says in e.value.body["error"]["message"], e.value.body
    assert client.messages.create(model=MODEL_ID, messages=ASK,
                                  max_tokens=2).stop_reason == "max_tokens"


def test_a_forced_tool_use_cut_by_max_tokens_is_no_text(client):
    """A tool_use cut by max_tokens: stop_reason max_tokens, the tool_use block (its
    input_json_deltas the JSON so far), no text block or text_delta. Before, the raw
    <tool_call> syntax was the text."""
    kwargs = dict(model=MODEL_ID, messages=ASK, tools=[WEATHER], **GREEDY,
                  tool_choice={"type": "tool", "name": "get_weather"})
    whole = client.messages.create(**kwargs, max_tokens=100)
    limit = whole.usage.output_tokens - 10   # inside the input
    message = client.messages.create(**kwargs, max_tokens=limit)
    assert message.stop_reason == "max_tokens"
    assert [(b.type, b.name) for b in message.content] == [("tool_use", "get_weather")]
    with client.messages.stream(**kwargs, max_tokens=limit) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert not [e for e in events if e.type == "text"]
    partial = "".join(e.partial_json for e in events if e.type == "input_json")
    assert partial and json.dumps(whole.content[0].input).startswith(partial)
    assert final.stop_reason == "max_tokens"
    assert [b.type for b in final.content] == ["tool_use"]


def test_an_unknown_messages_path_is_a_404_in_anthropics_shape(client):
    with pytest.raises(anthropic.NotFoundError) as e:
        client.post("/v1/messages/batches", body={}, cast_to=anthropic.types.Message)
    assert e.value.body == {"type": "error", "error": {
        "type": "not_found_error", "message": e.value.body["error"]["message"]}}


def test_another_model_is_a_404_not_found_error(client):
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="not-this-model", messages=ASK, max_tokens=4)
    assert e.value.body["type"] == "error"   # Anthropic's shape, not OpenAI's
    assert e.value.body["error"]["type"] == "not_found_error"
    assert "not-this-model" in e.value.body["error"]["message"]


def test_a_wrong_api_key_is_a_401_and_bearer_or_x_api_key_pass(server, client):
    for auth in ({"api_key": "wrong"}, {"auth_token": "wrong"}):
        with pytest.raises(anthropic.AuthenticationError) as e:
            _client(server, **auth).messages.create(model=MODEL_ID, messages=ASK, max_tokens=2)
        assert e.value.body == {"type": "error", "error": {
            "type": "authentication_error", "message": e.value.body["error"]["message"]}}
    for auth in ({"api_key": KEY}, {"auth_token": KEY}):   # x-api-key, Authorization: Bearer
        assert _client(server, **auth).messages.create(
            model=MODEL_ID, messages=ASK, max_tokens=2).stop_reason == "max_tokens"


@pytest.fixture(scope="module")
def think_server(tmp_path_factory):
    template = tmp_path_factory.mktemp("template") / "think.jinja"
    template.write_text(THINK_TEMPLATE)
    process = ServerProcess("--kv-cache-tokens", "4096", "--chat-template", str(template))
    yield process
    process.close()


def test_a_think_template_gives_thinking_blocks_streamed_and_not(think_server):
    client = _client(think_server, api_key="unused")
    kwargs = dict(model=MODEL_ID, messages=[{"role": "user", "content": "What is 2+2?"}],
                  max_tokens=8, **GREEDY, thinking={"type": "enabled", "budget_tokens": 1024})
    chat = think_server.client(timeout=120).chat.completions.create(
        model=MODEL_ID, messages=kwargs["messages"], max_tokens=8, temperature=0)
    expected = chat.choices[0].message.model_extra["reasoning_content"]
    message = client.messages.create(**kwargs)
    assert [b.type for b in message.content] == ["thinking"]
    assert message.content[0].thinking == expected and expected
    with client.messages.stream(**kwargs) as stream:
        kinds = {e.type for e in stream}
        final = stream.get_final_message()
    assert "thinking" in kinds   # the helper's event for a thinking_delta
    assert _blocks(final) == _blocks(message)
