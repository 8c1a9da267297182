"""``metalrt serve`` for agents, through the official openai client on loopback: JSON
schema output (grammar-constrained, validated with jsonschema on 20 seeded samples),
forced tool calls whose arguments validate against the function's parameters, streamed
tool-call deltas reassembled by the client's stream helper into the non-streamed call,
<think> reasoning split off content (--chat-template with a template that opens it),
role: tool follow-ups, and bad input answered 4xx in OpenAI's shape while the server
keeps serving."""
import json

import jsonschema
import numpy as np
import pytest

from server_process import MODEL_ID, ServerProcess

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "kind": {"enum": ["cat", "dog", "bird"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12},
                 "maxItems": 3},
        "owner": {"type": "object",
                  "properties": {"id": {"type": "integer"}, "verified": {"type": "boolean"}},
                  "required": ["id", "verified"], "additionalProperties": False},
    },
    "required": ["name", "kind", "tags", "owner"],
    "additionalProperties": False,
}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 30},
                                  "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {}}}}
KEY = "sk-local-test"
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# SmolLM2's ChatML with a generation prompt that opens <think>, as DeepSeek-R1's does.
THINK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    template = tmp_path_factory.mktemp("template") / "think.jinja"
    template.write_text(THINK_TEMPLATE)
    process = ServerProcess("--kv-cache-tokens", "8192", "--chat-template", str(template),
                            api_key=KEY)
    yield process
    process.close()


@pytest.fixture(scope="module")
def client(server):
    return server.client(timeout=120)


def test_json_schema_output_validates_on_20_seeded_samples(client):
    for seed in range(20):
        reply = client.chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": "Describe a pet as JSON."}],
            temperature=1.0, seed=seed, max_tokens=160,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "pet", "schema": SCHEMA, "strict": True}})
        choice = reply.choices[0]
        assert choice.finish_reason == "stop", (seed, choice.message.content)
        jsonschema.validate(json.loads(choice.message.content), SCHEMA)


def test_json_object_output_is_an_object(client):
    reply = client.chat.completions.create(
        model=MODEL_ID, messages=ASK, temperature=0, max_tokens=100,
        response_format={"type": "json_object"})
    assert isinstance(json.loads(reply.choices[0].message.content), dict)


def test_named_tool_choice_arguments_validate(client):
    for seed in range(5):
        reply = client.chat.completions.create(
            model=MODEL_ID, messages=ASK, tools=[WEATHER, TIME], temperature=1.0, seed=seed,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=100)
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls", (seed, choice.message.content)
        assert choice.message.content is None
        (call,) = choice.message.tool_calls
        assert call.type == "function" and call.function.name == "get_weather"
        assert call.id.startswith("call_")
        jsonschema.validate(json.loads(call.function.arguments),
                            WEATHER["function"]["parameters"])


def test_required_tool_choice_calls_one_of_the_tools(client):
    reply = client.chat.completions.create(
        model=MODEL_ID, messages=ASK, tools=[WEATHER, TIME], tool_choice="required",
        parallel_tool_calls=False, temperature=0, max_tokens=100)
    (call,) = reply.choices[0].message.tool_calls
    assert call.function.name in ("get_weather", "get_time")
    assert isinstance(json.loads(call.function.arguments), dict)


def test_streamed_tool_call_reassembles_into_the_non_streamed_one(client):
    kwargs = dict(model=MODEL_ID, messages=ASK, tools=[WEATHER], temperature=0,
                  tool_choice={"type": "function", "function": {"name": "get_weather"}},
                  max_tokens=100)
    whole = client.chat.completions.create(**kwargs).choices[0]
    with client.chat.completions.stream(**kwargs) as stream:
        events = list(stream)
        streamed = stream.get_final_completion().choices[0]
    assert any(e.type == "tool_calls.function.arguments.done" for e in events)
    assert streamed.finish_reason == whole.finish_reason == "tool_calls"
    got = [(c.function.name, c.function.arguments) for c in streamed.message.tool_calls]
    assert got == [(c.function.name, c.function.arguments) for c in whole.message.tool_calls]


def test_a_tool_result_follow_up_renders_and_answers(client):
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}
    reply = client.chat.completions.create(
        model=MODEL_ID, tools=[WEATHER], temperature=0, max_tokens=8,
        messages=ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}])
    assert reply.choices[0].finish_reason in ("stop", "length")
    # The template saw the call (in the parser's syntax) and the result.
    assert reply.usage.prompt_tokens > client.chat.completions.create(
        model=MODEL_ID, messages=ASK, tools=[WEATHER], max_tokens=1).usage.prompt_tokens


def test_think_template_splits_reasoning_streamed_and_not(server, client):
    # The template opened <think>: the greedy reply (8 tokens, no </think> yet) is all
    # reasoning, the same text as a plain completion of the rendered prompt.
    prompt = ("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n")
    expected = client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=8,
                                         temperature=0).choices[0].text
    kwargs = dict(model=MODEL_ID, messages=[{"role": "user", "content": "What is 2+2?"}],
                  max_tokens=8, temperature=0)
    message = client.chat.completions.create(**kwargs).choices[0].message
    assert message.model_extra["reasoning_content"] == expected.lstrip("\n") and expected
    assert message.content == ""
    chunks = list(client.chat.completions.create(**kwargs, stream=True))
    streamed = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                       for c in chunks if c.choices)
    assert streamed == message.model_extra["reasoning_content"]
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@pytest.mark.parametrize("body, param", [
    ({"response_format": {"type": "json_schema",
                          "json_schema": {"name": "x", "schema": {"type": "objec"}}}},
     "response_format"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ({"messages": [{"role": "tool", "content": "18 C"}]}, "messages.0"),
])
def test_bad_agent_input_is_a_400_and_the_server_keeps_serving(server, client, body, param):
    request = {"model": MODEL_ID, "messages": ASK, "max_tokens": 4, **body}
    status, error = server.request("POST", "/v1/chat/completions", json.dumps(request).encode())
    assert status == 400, error
    assert set(error["error"]) == {"message", "type", "param", "code"}
    assert error["error"]["type"] == "invalid_request_error"
    assert (error["error"]["param"] or "").startswith(param), error
    assert client.chat.completions.create(model=MODEL_ID, messages=ASK,
                                          max_tokens=2).choices[0].finish_reason == "length"


def _steps(client, **kwargs):
    """[{token text: logprob}] of each greedy step of a text completion."""
    reply = client.completions.create(model=MODEL_ID, prompt=PENALTY_PROMPT, temperature=0,
                                      logprobs=20, **kwargs)
    lp = reply.choices[0].logprobs
    return lp.tokens, lp.top_logprobs


PENALTY_PROMPT = "one two one two one two one two one two one"


def test_logit_bias_moves_logprobs_as_the_formula_says(client):
    from metalrt.loaders import load_model_files

    tokens, tops = _steps(client, max_tokens=1)
    top = sorted(tops[0].items(), key=lambda kv: -kv[1])
    text, lp = top[1]                 # the runner-up gets the bias
    (token_id,) = load_model_files().tokenizer.encode(text, add_special_tokens=False)
    bias = 3.0
    _, biased = _steps(client, max_tokens=1, logit_bias={str(token_id): bias})
    p = np.exp(lp)
    expected = lp + bias - np.log(1 - p + p * np.exp(bias))
    assert abs(biased[0][text] - expected) < 2e-3
    # Every other token moves by the normalisation alone.
    other, lp_other = top[2]
    assert abs(biased[0][other] - (lp_other - np.log(1 - p + p * np.exp(bias)))) < 2e-3


@pytest.mark.parametrize("frequency, presence", [(0.7, 0.0), (0.0, 1.1), (0.5, 0.4)])
def test_penalties_move_logprobs_as_the_formula_says(client, frequency, presence):
    tokens, tops = _steps(client, max_tokens=2)
    # Step 1 is never penalised (nothing sampled yet), so step 2 follows the same first
    # token, sampled once: its logit drops by frequency + presence, the rest renormalise.
    repeated = tokens[0]
    assert repeated in tops[1], (tokens, tops[1])
    kept, steps = _steps(client, max_tokens=2, frequency_penalty=frequency,
                         presence_penalty=presence)
    assert kept[0] == repeated and steps[0] == pytest.approx(tops[0], abs=1e-4)
    d = frequency + presence
    p = np.exp(tops[1][repeated])
    norm = np.log(1 - p + p * np.exp(-d))
    assert abs(steps[1][repeated] - (tops[1][repeated] - d - norm)) < 2e-3
    others = [t for t in tops[1] if t in steps[1] and t != repeated]
    assert len(others) >= 3
    for t in others[:3]:
        assert abs(steps[1][t] - (tops[1][t] - norm)) < 2e-3


def test_a_wrong_api_key_is_a_401_and_the_right_ones_pass(server, client):
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"x-api-key": "wrong"}):
        request = urllib.request.Request(server.url + "/v1/models", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as e:
            opener.open(request, timeout=30)
        assert e.value.code == 401
        assert json.loads(e.value.read())["error"]["code"] == "invalid_api_key"
    with opener.open(urllib.request.Request(server.url + "/v1/models",
                                            headers={"x-api-key": KEY}), timeout=30) as r:
        assert json.loads(r.read())["data"][0]["id"] == MODEL_ID
    with opener.open(server.url + "/health", timeout=30) as r:   # open: health checks
        assert r.status == 200
    assert client.models.list().data[0].id == MODEL_ID          # Bearer, by the client


def test_metrics_parse_with_prometheus_client(server, client):
    from prometheus_client.parser import text_string_to_metric_families

    for _ in range(2):    # the second finds the prompt's blocks cached
        client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=4,
                                       temperature=0)
    with server.opener.open(server.url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    samples = {s.name + str(sorted(s.labels.items())): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    model = f"('model', '{MODEL_ID}')"   # every sample names its model
    assert samples[f"metalrt_requests_total[('finish_reason', 'length'), {model}]"] >= 1
    assert samples[f"metalrt_generation_tokens_total[{model}]"] >= 4
    assert samples[f"metalrt_prompt_tokens_total[{model}]"] > 0
    assert samples[f"metalrt_time_to_first_token_seconds_count[{model}]"] >= 1
    assert samples[f"metalrt_inter_token_latency_seconds_count[{model}]"] >= 3
    assert samples[f"metalrt_requests_waiting[{model}]"] == 0
    assert 0 <= samples[f"metalrt_kv_cache_usage_ratio[{model}]"] <= 1
    assert 0 < samples[f"metalrt_prefix_cache_hit_ratio[{model}]"] <= 1


def test_stop_token_ids_end_the_reply_without_their_text(client):
    from metalrt.loaders import load_model_files

    tokenizer = load_model_files().tokenizer
    free = client.completions.create(model=MODEL_ID, prompt=PENALTY_PROMPT, max_tokens=6,
                                     temperature=0, logprobs=0).choices[0]
    ids = [tokenizer.encode(t, add_special_tokens=False)[0] for t in free.logprobs.tokens]
    stopped = client.completions.create(model=MODEL_ID, prompt=PENALTY_PROMPT, max_tokens=6,
                                        temperature=0, extra_body={"stop_token_ids": [ids[2]]})
    choice = stopped.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.text == "".join(free.logprobs.tokens[:ids.index(ids[2])])
    assert stopped.usage.completion_tokens == ids.index(ids[2]) + 1


def test_a_forced_call_cut_by_max_tokens_is_a_partial_call_not_content(client):
    """OpenAI's behaviour for a call cut by the length limit: finish_reason "length",
    the call in tool_calls with the arguments written so far, no content; streamed (the
    client's stream helper) as not. Before, the raw <tool_call> text was the content."""
    kwargs = dict(model=MODEL_ID, messages=ASK, tools=[WEATHER], temperature=0,
                  tool_choice={"type": "function", "function": {"name": "get_weather"}})
    whole = client.chat.completions.create(**kwargs, max_tokens=100)
    arguments = whole.choices[0].message.tool_calls[0].function.arguments
    limit = whole.usage.completion_tokens - 10   # inside the arguments
    cut = client.chat.completions.create(**kwargs, max_tokens=limit).choices[0]
    assert cut.finish_reason == "length" and cut.message.content is None
    (call,) = cut.message.tool_calls
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    assert call.function.arguments and arguments.startswith(call.function.arguments)
    assert call.function.arguments != arguments
    with client.chat.completions.stream(**kwargs, max_tokens=limit) as stream:
        events = list(stream)
        # (get_final_completion raises LengthFinishReasonError, as it does for OpenAI.)
        streamed = stream.current_completion_snapshot.choices[0]
    assert not [e for e in events if e.type == "content.delta" and e.delta]
    assert streamed.finish_reason == "length" and not streamed.message.content
    assert [(c.function.name, c.function.arguments) for c in streamed.message.tool_calls] \
        == [("get_weather", call.function.arguments)]


@pytest.mark.parametrize("body, param, says", [
    ({"messages": ASK + [{"role": "tool", "tool_call_id": "call_nope", "content": "18 C"}]},
     "messages", "'call_nope' names no tool call"),
    ({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]},
     "messages.0.content", "image input is not supported by this server/model"),
    ({"messages": [{"role": "user", "content": None}]}, "messages.0",
     "a user message needs content"),
    ({"messages": [{"role": "system", "content": None}] + ASK}, "messages.0",
     "a system message needs content"),
    ({"tools": [WEATHER, TIME, WEATHER]}, "tools", "get_weather given more than once"),
])
def test_a_new_users_mistakes_are_clear_400s(server, client, body, param, says):
    import openai

    request = {"model": MODEL_ID, "messages": ASK, "max_tokens": 4, **body}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(**request)
    assert e.value.body["type"] == "invalid_request_error"
    assert (e.value.body["param"] or "").startswith(param), e.value.body
    assert says in e.value.body["message"], e.value.body
    assert client.chat.completions.create(model=MODEL_ID, messages=ASK,
                                          max_tokens=2).choices[0].finish_reason == "length"


@pytest.mark.parametrize("raw, says", [
    (b'{"model": ', "the request body is not valid JSON: Expecting value"),
    (b"[]", "the request body must be a JSON object"),
    ({"stop": 5}, "stop: must be a string or a list of strings"),
    ({"tool_choice": "maybe"}, "tool_choice: must be one of 'none', 'auto', 'required' or "
                               "an object"),
    ({"response_format": "json"}, "response_format: Input should be an object"),
    ({"messages": [{"role": "user", "content": [{"type": "video"}]}]},
     "messages.0.content: must be a string or a list of objects (messages.0.content.0.type: "
     "Input should be 'text')"),
])
def test_malformed_bodies_are_told_what_was_expected(server, raw, says):
    """No pydantic internals (union member tags such as ``stop.str``, class names,
    "dictionary or object to extract fields from") in the message."""
    body = raw if isinstance(raw, bytes) else json.dumps(
        {"model": MODEL_ID, "messages": ASK, "max_tokens": 2, **raw}).encode()
    status, error = server.request("POST", "/v1/chat/completions", body)
    assert status == 400 and error["error"]["message"] == says, error


def test_an_unknown_path_is_named_in_the_404(server):
    status, error = server.request("POST", "/v1/nothing", b"{}")
    assert status == 404 and error["error"] == {
        "message": "/v1/nothing is not an endpoint of this server", "type": "not_found_error",
        "param": None, "code": None}
