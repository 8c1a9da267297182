"""SentencePiece GGUF tokenizers (tokenizer.ggml.model = llama: TinyLlama, Llama 2,
Mistral, Gemma): a BPE model trained here with the sentencepiece package, with Llama's
settings (byte fallback, split digits, identity normalization, a dummy prefix), written
into a GGUF with the gguf package, read back by metalrt and checked against
sentencepiece itself, the reference, on text with accents, emoji, CJK, leading and
repeated spaces, digits and characters the vocabulary lacks."""
import io
import itertools

import gguf
import pytest
import sentencepiece as spm   # a test dependency (pip install '.[test]')

from metalrt.loaders.gguf_file import GGUFFile
from metalrt.tokenizer import Tokenizer

WORDS = ("the quick brown fox jumps over lazy dogs while naïve café owners serve crème brûlée "
         "à la carte; señor Müller façade Ærø smörgåsbord 東京 大阪 日本語 晴れ 雨 こんにちは 世界 "
         "你好 中文 한국어 😀 😂 👍 🎉 Once upon a time there was a little model").split()

# Reference text: a vocabulary the model learnt, and what it did not (🦙, Ωμέγα, the
# tab), which byte fallback must cover; leading, trailing and repeated spaces.
CORPUS = [
    "Once upon a time",
    " the quick brown fox",
    "  two leading spaces and trailing  ",
    "naïve café — crème brûlée à la carte",
    "東京は晴れ、大阪は雨。こんにちは世界",
    "emoji 😀👍🎉 and a ZWJ 👩‍💻 and a llama 🦙",
    "digits 0 12 345 6789 3.14159 2026-12-01",
    "Ωμέγα and\ta tab",
    "señor Müller's façade, Ærø",
    "",
    " ",
    "a",
]


def _training_lines():
    # Deterministic sentences from the word list, every digit included.
    for n, combo in enumerate(itertools.islice(itertools.permutations(WORDS, 4), 3000)):
        yield " ".join(combo) + f" {n} {n * 7919 % 1000}"


@pytest.fixture(scope="module")
def reference():
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=_training_lines(), model_writer=model, model_type="bpe",
        vocab_size=600, character_coverage=0.995, byte_fallback=True, split_digits=True,
        normalization_rule_name="identity", add_dummy_prefix=True,
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
        unk_id=0, bos_id=1, eos_id=2, user_defined_symbols=["<sep>"], minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def _token_type(sp, i):
    for check, kind in ((sp.is_unknown, gguf.TokenType.UNKNOWN), (sp.is_control, gguf.TokenType.CONTROL),
                        (sp.is_byte, gguf.TokenType.BYTE), (sp.is_unused, gguf.TokenType.UNUSED)):
        if check(i):
            return kind
    piece = sp.id_to_piece(i)
    return gguf.TokenType.USER_DEFINED if piece == "<sep>" else gguf.TokenType.NORMAL


@pytest.fixture(scope="module")
def gguf_tokenizer(reference, tmp_path_factory):
    """The tokenizer metalrt builds from a GGUF holding the reference's vocabulary, the
    way llama.cpp's convert script writes it."""
    path = str(tmp_path_factory.mktemp("spm") / "spm.gguf")
    sp = reference
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list([sp.id_to_piece(i) for i in range(sp.get_piece_size())])
    writer.add_token_scores([sp.get_score(i) for i in range(sp.get_piece_size())])
    writer.add_token_types([_token_type(sp, i) for i in range(sp.get_piece_size())])
    writer.add_unk_token_id(sp.unk_id())
    writer.add_bos_token_id(sp.bos_id())
    writer.add_eos_token_id(sp.eos_id())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Tokenizer.from_gguf_metadata(GGUFFile(path).metadata, path)


def test_the_corpus_exercises_byte_fallback(reference):
    # Otherwise the byte-fallback gates below would pass without testing it.
    ids = reference.encode("🦙 Ωμέγα\t")
    assert any(reference.is_byte(i) for i in ids)


@pytest.mark.parametrize("text", CORPUS)
def test_encodes_as_sentencepiece(reference, gguf_tokenizer, text):
    # llama.cpp adds BOS for SentencePiece vocabularies unless the file says otherwise.
    assert gguf_tokenizer.encode(text) == [reference.bos_id()] + reference.encode(text)
    assert gguf_tokenizer.encode(text, add_special_tokens=False) == reference.encode(text)


@pytest.mark.parametrize("text", CORPUS)
def test_decodes_as_sentencepiece(reference, gguf_tokenizer, text):
    ids = reference.encode(text)
    assert gguf_tokenizer.decode(ids) == reference.decode(ids) == text
    assert gguf_tokenizer.decode([reference.bos_id()] + ids, skip_special_tokens=True) == text


def test_streaming_detokenization_matches_the_full_decode(reference, gguf_tokenizer):
    text = " ".join(CORPUS)
    stream = gguf_tokenizer.detokenizer()
    pieces = [stream.add_token(i) for i in reference.encode(text)]
    assert "".join(pieces) + stream.finalize() == text


def test_special_and_user_defined_tokens(reference, gguf_tokenizer):
    # llama.cpp (and transformers' legacy Llama tokenizer) split the text at special
    # and user-defined tokens and give the text after one a space prefix too, where
    # sentencepiece would continue "b" without one; control tokens spelled in text (as
    # a chat template spells them) are the token.
    sep, eos = reference.piece_to_id("<sep>"), reference.eos_id()
    assert gguf_tokenizer.encode("a<sep>b", add_special_tokens=False) == [
        reference.piece_to_id("\u2581a"), sep, reference.piece_to_id("\u2581b")]
    assert gguf_tokenizer.encode("</s>", add_special_tokens=False) == [eos]
    assert gguf_tokenizer.decode([reference.piece_to_id("\u2581a"), eos]) == "a</s>"
    assert gguf_tokenizer.bos_token_id == 1 and gguf_tokenizer.eos_token_ids == (2,)


def test_without_a_space_prefix_as_gemma(reference):
    meta = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.add_space_prefix": False,
            "tokenizer.ggml.tokens": [reference.id_to_piece(i) for i in range(reference.get_piece_size())],
            "tokenizer.ggml.scores": [reference.get_score(i) for i in range(reference.get_piece_size())],
            "tokenizer.ggml.token_type": [int(_token_type(reference, i))
                                          for i in range(reference.get_piece_size())]}
    tok = Tokenizer.from_gguf_metadata(meta)
    # No "▁" before the first word: exactly what sentencepiece gives for " " + text,
    # minus that leading space's piece.
    ids = tok.encode("the fox", add_special_tokens=False)
    assert tok.id_to_token(ids[0]).startswith("t")
    assert tok.decode(ids) == "the fox"


def test_per_token_arrays_and_the_unknown_id_must_match_the_vocabulary():
    meta = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["<unk>", "a", "b"],
            "tokenizer.ggml.scores": [0.0, -1.0], "tokenizer.ggml.token_type": [2, 1, 1]}
    with pytest.raises(ValueError, match=r"\[tokenizer\] src: tokenizer\.ggml\.token_type \(3\) and "
                                         r"tokenizer\.ggml\.scores \(2\) must have one entry per token \(3\)"):
        Tokenizer.from_gguf_metadata(meta, "src")
    meta["tokenizer.ggml.scores"] = [0.0, -1.0, -2.0]
    meta["tokenizer.ggml.unknown_token_id"] = 3
    with pytest.raises(ValueError, match=r"\[tokenizer\] src: tokenizer\.ggml\.unknown_token_id is 3, "
                                         r"outside the vocabulary of 3 tokens"):
        Tokenizer.from_gguf_metadata(meta, "src")
