"""gpt-oss's harmony format offline (``server/harmony.py``): the o200k vocabulary that
openai-harmony needs is written from a model's own byte-level vocabulary, byte for byte
the published ``o200k_base.tiktoken`` (openai-harmony's sha256 check passes; another
vocabulary is refused naming the file), and completions rendered by openai-harmony
itself split into reasoning (analysis), content (final) and tool calls (commentary to
``functions.NAME``), the arguments validating against the tool's parameters."""
import base64
import json

import jsonschema
import pytest
from openai_harmony import Message, Role   # pinned in the test extra

import harmony_vocab
from metalrt.server import harmony

WEATHER = {"type": "object", "properties": {"city": {"type": "string"},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}


@pytest.fixture(scope="module")
def model_vocab():
    """o200k as a tokenizer.json lists it (GPT-2 byte-level strings, id = rank), and
    the published file's bytes."""
    published = harmony_vocab.path().read_bytes()
    char_of = {b: c for c, b in harmony._byte_of_char().items()}
    tokens = []
    for rank, line in enumerate(published.decode().splitlines()):
        token, number = line.split(" ")
        assert int(number) == rank
        tokens.append("".join(char_of[b] for b in base64.b64decode(token)))
    specials = ["<|startoftext|>", "<|endoftext|>"]     # gpt-oss's ids 199998, 199999
    return tokens + specials, published


@pytest.fixture(scope="module")
def directory(model_vocab, tmp_path_factory):
    tokens, _ = model_vocab
    return harmony.vocab_file(tokens, str(tmp_path_factory.mktemp("harmony")))[
        :-len("/" + harmony.VOCAB_NAME)]


def test_the_alphabet_is_the_byte_level_one_of_tokenizers():
    from tokenizers import pre_tokenizers

    assert set(harmony._byte_of_char()) == set(pre_tokenizers.ByteLevel.alphabet())
    assert sorted(harmony._byte_of_char().values()) == list(range(256))
    assert harmony._byte_of_char()["Ġ"] == ord(" ") and harmony._byte_of_char()["Ċ"] == 10


def test_vocab_file_is_the_published_file_and_harmony_loads_it(model_vocab, directory):
    _, published = model_vocab
    with open(f"{directory}/{harmony.VOCAB_NAME}", "rb") as f:
        assert f.read() == published
    enc = harmony.encoding(directory)
    ids = enc.encode("<|channel|>final<|message|>Hello world", allowed_special="all")
    assert ids[0] == 200005 and ids[2] == 200008          # <|channel|>, <|message|>
    assert enc.decode(ids) == "<|channel|>final<|message|>Hello world"


def test_another_vocabulary_is_refused_naming_the_file(model_vocab, tmp_path):
    tokens, _ = model_vocab
    changed = list(tokens)
    changed[1000], changed[1001] = changed[1001], changed[1000]
    other = harmony.vocab_file(changed, str(tmp_path))
    harmony.encoding.cache_clear()
    try:
        with pytest.raises(ValueError, match="cannot be used") as e:
            harmony.encoding(str(tmp_path))
        assert other in str(e.value)
    finally:
        harmony.encoding.cache_clear()
    with pytest.raises(ValueError, match="199998"):
        harmony.vocab_file(tokens[:1000], str(tmp_path))
    with pytest.raises(ValueError, match="token 5 .* not byte-level"):
        harmony.vocab_file(tokens[:5] + ["a\u4e00"] + tokens[6:], str(tmp_path))


def _completion(directory, *messages) -> str:
    """``messages`` rendered by openai-harmony, less the ``<|start|>assistant`` that
    the prompt ends with (the model generates from there)."""
    enc = harmony.encoding(directory)
    ids = [t for m in messages for t in enc.render(m)]
    text = enc.decode(ids)
    assert text.startswith("<|start|>assistant")
    return text[len("<|start|>assistant"):]


def _assistant(text, channel, recipient=None):
    m = Message.from_role_and_content(Role.ASSISTANT, text).with_channel(channel)
    if recipient:
        m = m.with_recipient(recipient).with_content_type("<|constrain|>json")
    return m


def test_analysis_and_final_split_into_reasoning_and_content(directory):
    text = _completion(directory, _assistant("The user greets; reply kindly.", "analysis"),
                       _assistant("Hello! How can I help?", "final"))
    assert "<|channel|>analysis" in text and "<|channel|>final" in text
    assert harmony.parse(text, directory) == ("The user greets; reply kindly.",
                                              "Hello! How can I help?", [])


def test_a_commentary_call_is_a_tool_call_whose_arguments_validate(directory):
    arguments = {"city": "Paris", "unit": "celsius"}
    text = _completion(directory, _assistant("Need the weather.", "analysis"),
                       _assistant(json.dumps(arguments), "commentary",
                                  "functions.get_weather"))
    assert "to=functions.get_weather" in text and text.endswith("<|call|>")
    reasoning, content, calls = harmony.parse(text, directory, {"get_weather": WEATHER})
    assert (reasoning, content) == ("Need the weather.", "")
    assert [c.name for c in calls] == ["get_weather"]
    assert json.loads(calls[0].arguments) == arguments
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)


def test_an_unknown_tool_or_bad_arguments_stay_content_and_a_cut_reply_keeps_its_text(
        directory):
    unknown = _completion(directory, _assistant('{"x": 1}', "commentary", "functions.nope"))
    assert harmony.parse(unknown, directory, {"get_weather": WEATHER}) == ('', '{"x": 1}', [])
    broken = _completion(directory, _assistant('{"city": ', "commentary",
                                               "functions.get_weather"))
    assert harmony.parse(broken, directory, {"get_weather": WEATHER})[2] == []
    cut = "<|channel|>analysis<|message|>Think<|end|><|start|>assistant<|channel|>final" \
          "<|message|>Sunny and"
    assert harmony.parse(cut, directory) == ("Think", "Sunny and", [])
