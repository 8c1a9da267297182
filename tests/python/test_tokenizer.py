"""Tokenizer gates: byte-level BPE built from GGUF metadata, chat templates, and streaming
detokenization that never splits a UTF-8 character."""
import datetime

import pytest
from tokenizers import decoders

from metalrt.tokenizer import StreamingDetokenizer, Tokenizer
from tiny_models import tokenizer_metadata as tiny_metadata

# Accented, CJK, emoji (4-byte, and a ZWJ sequence), and a 2-byte letter at the very end.
MULTIBYTE = "naïve café — 東京は晴れ 😀👩‍💻 ok ñ"


@pytest.fixture
def tiny():
    return Tokenizer.from_gguf_metadata(tiny_metadata(), "tiny")


def tid(tok, token):
    return tok.backend.token_to_id(token)


def test_bpe_merges_digits_and_special_tokens(tiny):
    # "the" has no leading space: t + he; " the" merges all the way to Ġthe.
    assert tiny.encode("the the") == [tid(tiny, "t"), tid(tiny, "he"), tid(tiny, "Ġthe")]
    # smollm pre-tokenization: each digit on its own, then byte-level.
    assert tiny.encode("12") == [tid(tiny, "1"), tid(tiny, "2")]
    assert tiny.encode("<|im_start|>x<|im_end|>") == [1, tid(tiny, "x"), 2]
    assert tiny.decode(tiny.encode(MULTIBYTE)) == MULTIBYTE
    assert tiny.bos_token_id == 1 and tiny.eos_token_ids == (2,)


@pytest.mark.parametrize("pre,pieces", [
    ("gpt2", ["I", "'m", "Ġ12345", "Ġok"]),
    ("smollm", ["I", "'m", "Ġ", "1", "2", "3", "4", "5", "Ġok"]),
    ("llama-bpe", ["I", "'m", "Ġ", "123", "45", "Ġok"]),
    ("qwen2", ["I", "'m", "Ġ", "1", "2", "3", "4", "5", "Ġok"]),
])
def test_pre_tokenizers(pre, pieces):
    tok = Tokenizer.from_gguf_metadata(tiny_metadata(**{"tokenizer.ggml.pre": pre}))
    assert [p for p, _ in tok.backend.pre_tokenizer.pre_tokenize_str("I'm 12345 ok")] == pieces


def test_end_of_turn_tokens_end_generation():
    tok = Tokenizer.from_gguf_metadata(tiny_metadata(**{"tokenizer.ggml.eot_token_id": 0}))
    assert tok.eos_token_ids == (2, 0)


def test_add_bos_token_prepends_bos(tiny):
    with_bos = Tokenizer.from_gguf_metadata(tiny_metadata(**{"tokenizer.ggml.add_bos_token": True}))
    assert with_bos.encode("x") == [1, tid(tiny, "x")]
    assert with_bos.encode("x", add_special_tokens=False) == [tid(tiny, "x")]
    assert tiny.encode("x") == [tid(tiny, "x")]


@pytest.mark.parametrize("key,value,message", [
    ("tokenizer.ggml.model", "bert", r"tokenizer\.ggml\.model is 'bert'; supported: 'gpt2' \(byte-level "
                                     r"BPE\), 'llama' \(SentencePiece BPE\)"),
    ("tokenizer.ggml.pre", "mystery", r"tokenizer\.ggml\.pre is 'mystery'; supported: gpt2"),
    ("tokenizer.ggml.bos_token_id", 1000, r"tokenizer\.ggml\.bos_token_id is 1000, outside "
                                          r"the vocabulary of 262 tokens"),
])
def test_unsupported_tokenizer_metadata(key, value, message):
    with pytest.raises(ValueError, match=r"\[tokenizer\] src: " + message):
        Tokenizer.from_gguf_metadata(tiny_metadata(**{key: value}), "src")


def test_missing_tokenizer_metadata():
    meta = tiny_metadata()
    del meta["tokenizer.ggml.merges"]
    with pytest.raises(ValueError, match=r"\[tokenizer\] src: missing metadata key "
                                         r"'tokenizer\.ggml\.merges'"):
        Tokenizer.from_gguf_metadata(meta, "src")


def test_chat_template(tiny):
    text = tiny.apply_chat_template([{"role": "user", "content": "hi"}])
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tiny.apply_chat_template([{"role": "user", "content": "hi"}],
                                    add_generation_prompt=False) == "<|im_start|>user\nhi<|im_end|>\n"
    no_template = Tokenizer(tiny.backend, bos_token_id=None, eos_token_ids=[2])
    with pytest.raises(ValueError, match=r"\[apply_chat_template\] this tokenizer has no chat"):
        no_template.apply_chat_template([{"role": "user", "content": "hi"}])


def test_chat_template_raise_exception(tiny):
    strict = Tokenizer(tiny.backend, bos_token_id=1, eos_token_ids=[2],
                       chat_template="{{ raise_exception('roles must alternate') }}")
    with pytest.raises(ValueError, match=r"\[apply_chat_template\] roles must alternate"):
        strict.apply_chat_template([])


def test_chat_template_helpers_of_transformers(tiny):
    # tojson keeps non-ASCII and does not HTML-escape; strftime_now formats today's date.
    helpers = Tokenizer(tiny.backend, bos_token_id=1, eos_token_ids=[2], chat_template=(
        "{{ messages[0] | tojson }}|{{ strftime_now('%Y') }}"))
    text = helpers.apply_chat_template([{"role": "user", "content": "café <b>"}])
    assert text == '{"role": "user", "content": "café <b>"}|' + str(datetime.date.today().year)


def stream(tok, ids):
    detok = StreamingDetokenizer(tok)
    pieces = [detok.add_token(i) for i in ids]
    return pieces, detok.finalize()


@pytest.fixture(params=["byte_level", "sequence"])
def streaming_tokenizer(request):
    """The tiny tokenizer with its byte-level decoder as is (pending ids dropped once
    emitted) or wrapped in a Sequence (every id decoded each time)."""
    tok = Tokenizer.from_gguf_metadata(tiny_metadata())
    if request.param == "sequence":
        tok.backend.decoder = decoders.Sequence([decoders.ByteLevel()])
    return tok


def test_streaming_never_splits_a_character(streaming_tokenizer):
    # Without merges for these bytes, every UTF-8 byte is its own token: each multi-byte
    # character spans 2–4 tokens.
    tiny = streaming_tokenizer
    ids = tiny.encode(MULTIBYTE * 3)
    assert len(ids) > len(MULTIBYTE)
    pieces, tail = stream(tiny, ids)
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) + tail == MULTIBYTE * 3 and tail == ""
    # A piece appears exactly on the token that completes a character: "ï" is 2 bytes.
    first = MULTIBYTE.index("ï")
    assert pieces[first] == "" and pieces[first + 1] == "ï"


def test_streaming_flushes_incomplete_tail(streaming_tokenizer):
    ids = streaming_tokenizer.encode("a😀")[:-1]  # the emoji's last byte never arrives
    pieces, tail = stream(streaming_tokenizer, ids)
    assert pieces == ["a", "", "", ""]
    assert tail == "\ufffd"
