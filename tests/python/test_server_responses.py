"""``metalrt serve``'s ``/v1/responses`` through the official openai client on loopback:
text output equal to the chat endpoint's greedy output, streams that the client's
``responses.stream`` helper reassembles into the non-streamed response, forced
function calls whose arguments validate against the parameters and their
``function_call_output`` follow-ups, ``text.format`` json_schema output, reasoning
items on a ``<think>`` template, and bad input answered 400 in OpenAI's shape (raised
by the client as ``openai.BadRequestError``) while the server keeps serving."""
import json

import jsonschema
import openai
import pytest

from server_process import MODEL_ID, ServerProcess

ASK = "What is the weather in Paris?"
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather of a city",
           "parameters": {"type": "object",
                          "properties": {"city": {"type": "string", "maxLength": 30},
                                         "unit": {"enum": ["celsius", "fahrenheit"]}},
                          "required": ["city", "unit"], "additionalProperties": False}}
TIME = {"type": "function", "name": "get_time", "parameters": {"type": "object",
                                                              "properties": {}}}
FORCED = {"type": "function", "name": "get_weather"}
PET = {"type": "object",
       "properties": {"name": {"type": "string", "maxLength": 20},
                      "kind": {"enum": ["cat", "dog", "bird"]},
                      "age": {"type": "integer", "minimum": 0, "maximum": 30}},
       "required": ["name", "kind", "age"], "additionalProperties": False}
# SmolLM2's ChatML with a generation prompt that opens <think>, as DeepSeek-R1's does.
THINK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")


@pytest.fixture(scope="module")
def server():
    process = ServerProcess("--kv-cache-tokens", "8192")
    yield process
    process.close()


@pytest.fixture(scope="module")
def client(server):
    return server.client(timeout=120)


def _items(response) -> list:
    """The output items without their random ids."""
    return [{k: v for k, v in item.to_dict(exclude_none=True).items() if k != "id"}
            for item in response.output]


@pytest.mark.parametrize("instructions", [None, "Answer in one short sentence."])
def test_text_output_equals_the_chat_endpoints_greedy_output(client, instructions):
    question = "What is the capital of France?"
    messages = [{"role": "user", "content": question}]
    if instructions:
        messages.insert(0, {"role": "system", "content": instructions})
    chat = client.chat.completions.create(model=MODEL_ID, messages=messages, temperature=0,
                                          max_tokens=40)
    response = client.responses.create(model=MODEL_ID, input=question, temperature=0,
                                       max_output_tokens=40, instructions=instructions)
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.model == MODEL_ID and response.instructions == instructions
    (message,) = response.output
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_")
    assert response.output_text == chat.choices[0].message.content and response.output_text
    done = chat.choices[0].finish_reason == "stop"
    assert response.status == ("completed" if done else "incomplete")
    assert message.status == response.status
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.usage.output_tokens == chat.usage.completion_tokens
    assert response.usage.total_tokens == chat.usage.total_tokens


def test_input_items_render_as_the_same_chat_messages(client):
    # Easy messages, typed messages with input_text/output_text parts and a developer
    # message give the chat endpoint's prompt and reply.
    items = [{"role": "developer", "content": "Be brief."},
             {"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "Name a colour."}]},
             {"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": "Blue.", "annotations": []}]},
             {"role": "user", "content": "Another one?"}]
    messages = [{"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "Name a colour."},
                {"role": "assistant", "content": "Blue."},
                {"role": "user", "content": "Another one?"}]
    chat = client.chat.completions.create(model=MODEL_ID, messages=messages, temperature=0,
                                          max_tokens=12)
    response = client.responses.create(model=MODEL_ID, input=items, temperature=0,
                                       max_output_tokens=12)
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.output_text == chat.choices[0].message.content


def test_stream_reassembles_into_the_non_streamed_response(client):
    kwargs = dict(model=MODEL_ID, input="Say hello.", temperature=0, max_output_tokens=200)
    whole = client.responses.create(**kwargs)
    assert whole.status == "completed"
    with client.responses.stream(**kwargs) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(e.delta for e in deltas) == whole.output_text
    assert deltas[-1].snapshot == whole.output_text    # the helper's own accumulation
    item_id = events[2].item.id
    assert all(e.item_id == item_id and e.output_index == 0 for e in deltas)
    assert final.output_text == whole.output_text and final.status == "completed"
    assert _items(final) == _items(whole)
    # (cached_tokens differ: the second request finds the first's prompt cached)
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.total_tokens) \
        == (whole.usage.input_tokens, whole.usage.output_tokens, whole.usage.total_tokens)


def test_a_stream_cut_by_max_output_tokens_ends_incomplete(client):
    kwargs = dict(model=MODEL_ID, input="Tell me a long story.", temperature=0,
                  max_output_tokens=6)
    whole = client.responses.create(**kwargs)
    assert whole.status == "incomplete"
    assert whole.incomplete_details.reason == "max_output_tokens"
    events = list(client.responses.create(**kwargs, stream=True))
    assert events[-1].type == "response.incomplete"
    last = events[-1].response
    assert last.status == "incomplete" and last.output_text == whole.output_text
    assert _items(last) == _items(whole) and whole.output[0].status == "incomplete"


def test_named_tool_choice_yields_a_function_call_that_validates(client):
    for seed in range(3):
        response = client.responses.create(
            model=MODEL_ID, input=ASK, tools=[WEATHER, TIME], tool_choice=FORCED,
            temperature=1.0, max_output_tokens=100, extra_body={"seed": seed})
        assert response.status == "completed"
        (call,) = response.output
        assert call.type == "function_call" and call.name == "get_weather"
        assert call.call_id.startswith("call_") and call.id.startswith("fc_")
        jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    assert response.tools[0].name == "get_weather"
    assert response.tool_choice.name == "get_weather"


def test_a_function_call_cut_by_max_output_tokens_is_no_output_text(client):
    """Cut inside its arguments, the forced call is a function_call item with the
    arguments written so far, the response incomplete; no output_text. Before, the raw
    <tool_call> syntax was a message's text."""
    kwargs = dict(model=MODEL_ID, input=ASK, tools=[WEATHER], tool_choice=FORCED,
                  temperature=0)
    whole = client.responses.create(**kwargs, max_output_tokens=100)
    limit = whole.usage.output_tokens - 10   # inside the arguments
    cut = client.responses.create(**kwargs, max_output_tokens=limit)
    assert cut.status == "incomplete" and cut.output_text == ""
    (call,) = cut.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert call.arguments and whole.output[0].arguments.startswith(call.arguments)
    assert call.arguments != whole.output[0].arguments


def test_a_streamed_function_call_reassembles_into_the_non_streamed_one(client):
    kwargs = dict(model=MODEL_ID, input=ASK, tools=[WEATHER], tool_choice=FORCED,
                  temperature=0, max_output_tokens=100)
    whole = client.responses.create(**kwargs)
    with client.responses.stream(**kwargs) as stream:
        events = list(stream)
        final = stream.get_final_response()
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done.arguments == whole.output[0].arguments and done.name == "get_weather"
    assert "".join(e.delta for e in events
                   if e.type == "response.function_call_arguments.delta") == done.arguments
    assert _items(final) == [{**i, "call_id": final.output[0].call_id} for i in _items(whole)]


def test_a_function_call_output_follow_up_is_accepted(client):
    first = client.responses.create(model=MODEL_ID, input=ASK, tools=[WEATHER],
                                    tool_choice=FORCED, temperature=0, max_output_tokens=100)
    (call,) = first.output
    follow_up = [{"role": "user", "content": ASK}, *first.output,
                 {"type": "function_call_output", "call_id": call.call_id,
                  "output": "18 C, sunny"}]
    reply = client.responses.create(model=MODEL_ID, input=follow_up, tools=[WEATHER],
                                    temperature=0, max_output_tokens=8)
    assert reply.status in ("completed", "incomplete") and reply.output
    # The prompt holds the call and its result: as the chat endpoint renders them.
    chat = client.chat.completions.create(
        model=MODEL_ID, temperature=0, max_tokens=8,
        tools=[{"type": "function", "function": {k: v for k, v in WEATHER.items()
                                                 if k != "type"}}],
        messages=[{"role": "user", "content": ASK},
                  {"role": "assistant", "content": None, "tool_calls": [{
                      "id": call.call_id, "type": "function",
                      "function": {"name": call.name, "arguments": call.arguments}}]},
                  {"role": "tool", "tool_call_id": call.call_id, "content": "18 C, sunny"}])
    assert reply.usage.input_tokens == chat.usage.prompt_tokens > first.usage.input_tokens
    assert reply.output_text == (chat.choices[0].message.content or "")


def test_text_format_json_schema_output_validates(client):
    for seed in range(5):
        response = client.responses.create(
            model=MODEL_ID, input="Describe a pet as JSON.", temperature=1.0,
            max_output_tokens=120, extra_body={"seed": seed},
            text={"format": {"type": "json_schema", "name": "pet", "schema": PET,
                             "strict": True}})
        assert response.status == "completed", response.output_text
        jsonschema.validate(json.loads(response.output_text), PET)
    assert response.text.format.type == "json_schema" and response.text.format.name == "pet"


@pytest.mark.parametrize("body, param", [
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    ({"previous_response_id": "resp_123"}, "previous_response_id"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input"),
    ({"tools": [{"type": "web_search"}]}, "tools.0"),
    ({"input": []}, "input"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "input"),
    ({"input": [{"role": "user", "content": ASK},
                {"type": "function_call_output", "call_id": "call_nope", "output": "18 C"}]},
     "input"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "objec"}}}},
     "text.format"),
])
def test_bad_input_is_a_400_and_the_server_keeps_serving(server, client, body, param):
    request = {"model": MODEL_ID, "input": ASK, "max_output_tokens": 4, **body}
    status, error = server.request("POST", "/v1/responses", json.dumps(request).encode())
    assert status == 400, error
    assert set(error["error"]) == {"message", "type", "param", "code"}
    assert error["error"]["type"] == "invalid_request_error"
    assert (error["error"]["param"] or "").startswith(param), error
    assert client.responses.create(model=MODEL_ID, input=ASK,
                                   max_output_tokens=2).status == "incomplete"


def test_the_client_raises_bad_request_with_the_servers_message(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL_ID, input=ASK, previous_response_id="resp_1")
    assert "does not store responses" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL_ID, input=ASK, tools=[WEATHER],
                                tool_choice={"type": "function", "name": "get_time"})
    assert "get_time" in e.value.message and e.value.body["param"] == "tool_choice"
    with pytest.raises(openai.BadRequestError) as e:   # a result of no call
        client.responses.create(model=MODEL_ID, input=[
            {"role": "user", "content": ASK},
            {"type": "function_call_output", "call_id": "call_nope", "output": "18 C"}])
    assert "input[1].call_id 'call_nope' names no function_call item" in e.value.message
    assert e.value.body["param"] == "input"


@pytest.fixture(scope="module")
def think_client(tmp_path_factory):
    template = tmp_path_factory.mktemp("template") / "think.jinja"
    template.write_text(THINK_TEMPLATE)
    process = ServerProcess("--kv-cache-tokens", "4096", "--chat-template", str(template))
    yield process.client(timeout=120)
    process.close()


def test_think_template_gives_a_reasoning_item_streamed_and_not(think_client):
    kwargs = dict(model=MODEL_ID, max_tokens=8, temperature=0,
                  messages=[{"role": "user", "content": "What is 2+2?"}])
    choice = think_client.chat.completions.create(**kwargs).choices[0]
    reasoning = choice.message.model_extra["reasoning_content"]
    assert reasoning and not choice.message.content
    request = dict(model=MODEL_ID, input="What is 2+2?", max_output_tokens=8, temperature=0)
    response = think_client.responses.create(**request)
    (item,) = response.output
    assert response.status == ("completed" if choice.finish_reason == "stop" else "incomplete")
    assert item.type == "reasoning" and item.id.startswith("rs_")
    assert item.content[0].type == "reasoning_text" and item.content[0].text == reasoning
    assert 0 < response.usage.output_tokens_details.reasoning_tokens <= 8
    events = list(think_client.responses.create(**request, stream=True))
    deltas = [e.delta for e in events if e.type == "response.reasoning_text.delta"]
    assert "".join(deltas) == reasoning
    assert events[-1].type == "response." + response.status
    assert _items(events[-1].response) == _items(response)
