"""Tokenizers for metalrt models: a ``tokenizers.Tokenizer`` with bos/eos ids, a jinja2
chat template and a streaming detokenizer.

Built either from a GGUF file's ``tokenizer.ggml.*`` metadata, as llama.cpp's
``llama-vocab.cpp`` reads it (byte-level BPE, ``gpt2``; SentencePiece BPE with byte
fallback, ``llama``: TinyLlama, Llama 2, Mistral, Gemma), or from a Hugging Face
``tokenizer.json`` with its ``tokenizer_config.json``. Chat templates are rendered the way
``transformers`` renders them (``PreTrainedTokenizerBase.apply_chat_template``): a
sandboxed jinja2 environment with ``trim_blocks``, ``lstrip_blocks`` and loop controls.
"""
from __future__ import annotations

import datetime
import json
import os
from typing import Any, Iterable, Mapping, Sequence

import jinja2
import jinja2.sandbox
import tokenizers
from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers, processors

# llama.cpp's token types (``tokenizer.ggml.token_type``, gguf.TokenType).
_TOKEN_NORMAL = 1
_TOKEN_UNKNOWN = 2
_TOKEN_CONTROL = 3
_TOKEN_USER_DEFINED = 4
_TOKEN_BYTE = 6
# SentencePiece's whitespace symbol, U+2581 LOWER ONE EIGHTH BLOCK.
_SPM_SPACE = "\u2581"

# ``tokenizer.ggml.pre`` values whose pre-tokenization we reproduce (llama.cpp's
# ``llama-vocab.cpp`` gives each name its split regexes). GPT-2: the GPT-2 regex through
# byte-level. SmolLM/StarCoder: every digit split off first, then the GPT-2 regex.
# Llama 3, Qwen2 and o200k: their tokenizer.json split regex, then byte-level without a
# regex.
_GPT2_PRE = ("gpt2", "default")
_DIGITS_FIRST_PRE = ("smollm", "starcoder", "refact", "codeshell")
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = _LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")
# o200k's (gpt-4o, gpt-oss: "gpt-4o" in files of llama.cpp's converter).
_O200K_SPLIT = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
                r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
                r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_SPLIT_PRE = {"llama-bpe": _LLAMA3_SPLIT, "llama3": _LLAMA3_SPLIT, "qwen2": _QWEN2_SPLIT,
              "gpt-4o": _O200K_SPLIT}


def _byte_level_pre_tokenizer(pre: str, source: str) -> pre_tokenizers.PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _GPT2_PRE:
        return byte_level
    if pre in _DIGITS_FIRST_PRE:
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre in _SPLIT_PRE:
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(tokenizers.Regex(_SPLIT_PRE[pre]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    raise ValueError(f"[tokenizer] {source}: tokenizer.ggml.pre is '{pre}'; supported: "
                     f"{', '.join(_GPT2_PRE + _DIGITS_FIRST_PRE + tuple(_SPLIT_PRE))}")


def _bpe(source: str, **kwargs) -> tokenizers.Tokenizer:
    """A BPE tokenizer; the ValueError naming ``source`` for a vocabulary or merges the
    library refuses (it raises a bare Exception)."""
    try:
        return tokenizers.Tokenizer(models.BPE(**kwargs))
    except Exception as e:   # tokenizers' own errors are Exception itself
        raise ValueError(f"[tokenizer] {source}: {e}") from None


def _require(metadata: Mapping[str, Any], key: str, source: str) -> Any:
    if key not in metadata:
        raise ValueError(f"[tokenizer] {source}: missing metadata key '{key}'")
    return metadata[key]


def _byte_level_bpe(metadata: Mapping[str, Any], tokens: Sequence[str], source: str) -> tokenizers.Tokenizer:
    """GPT-2 style byte-level BPE: the GGUF's merges, its ``tokenizer.ggml.pre`` splits."""
    merges = [tuple(m.split(" ", 1)) for m in _require(metadata, "tokenizer.ggml.merges", source)]
    backend = _bpe(source, vocab={tok: i for i, tok in enumerate(tokens)}, merges=merges,
                   fuse_unk=False)
    backend.pre_tokenizer = _byte_level_pre_tokenizer(
        metadata.get("tokenizer.ggml.pre", "default"), source)
    backend.decoder = decoders.ByteLevel()
    return backend


def _sentencepiece_merges(tokens: Sequence[str], scores: Sequence[float],
                          types: Sequence[int]) -> list[tuple[str, str]]:
    """SentencePiece BPE as merge rules. Its encoder (and llama.cpp's
    ``llm_tokenizer_spm``) repeatedly joins the adjacent pair whose joined piece is a
    normal (or user-defined) piece of the highest score, leftmost first; ``tokenizers``'
    BPE applies the lowest-ranked merge first, leftmost first. So every split of such a
    piece into two such pieces is a merge, ranked by the joined piece's score
    (descending), then by its id."""
    mergeable = {tok: i for i, tok in enumerate(tokens)
                 if types[i] in (_TOKEN_NORMAL, _TOKEN_USER_DEFINED)}
    ranked = []
    for piece, i in mergeable.items():
        for cut in range(1, len(piece)):
            if piece[:cut] in mergeable and piece[cut:] in mergeable:
                ranked.append((-float(scores[i]), i, cut))
    ranked.sort()
    return [(tokens[i][:cut], tokens[i][cut:]) for _, i, cut in ranked]


def _sentencepiece_bpe(metadata: Mapping[str, Any], tokens: Sequence[str], source: str) -> tokenizers.Tokenizer:
    """SentencePiece BPE from ``tokenizer.ggml.{tokens,scores,token_type}`` as llama.cpp
    runs it: spaces become U+2581 with one prepended to the text and after every special
    token (``tokenizer.ggml.add_space_prefix``, default true; Gemma sets it false); a
    character no piece covers becomes its UTF-8 bytes (``<0xAB>`` pieces), else the
    unknown piece. Scores default to minus the id, token types to normal."""
    types = list(metadata.get("tokenizer.ggml.token_type", [_TOKEN_NORMAL] * len(tokens)))
    scores = metadata.get("tokenizer.ggml.scores", [-float(i) for i in range(len(tokens))])
    if len(types) != len(tokens) or len(scores) != len(tokens):
        raise ValueError(f"[tokenizer] {source}: tokenizer.ggml.token_type ({len(types)}) and "
                         f"tokenizer.ggml.scores ({len(scores)}) must have one entry per token "
                         f"({len(tokens)})")
    unknown = metadata.get("tokenizer.ggml.unknown_token_id",
                           next((i for i, t in enumerate(types) if t == _TOKEN_UNKNOWN), None))
    backend = _bpe(source, vocab={tok: i for i, tok in enumerate(tokens)},
                   merges=_sentencepiece_merges(tokens, scores, types),
                   unk_token=tokens[unknown] if unknown is not None else None,
                   byte_fallback=_TOKEN_BYTE in types, fuse_unk=True)
    space_prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
    escape = normalizers.Replace(" ", _SPM_SPACE)
    backend.normalizer = (normalizers.Sequence([normalizers.Prepend(_SPM_SPACE), escape])
                          if space_prefix else escape)
    steps = [decoders.Replace(_SPM_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if space_prefix:
        steps.append(decoders.Strip(" ", 1, 0))   # the prepended space
    backend.decoder = decoders.Sequence(steps)
    return backend


# tokenizer.ggml.model -> (backend builder, whether BOS is added by default, as in
# llama.cpp: SentencePiece vocabularies add it, byte-level BPE ones do not).
_GGUF_MODELS = {"gpt2": (_byte_level_bpe, False), "llama": (_sentencepiece_bpe, True)}


def _token_content(entry: Any) -> str | None:
    """tokenizer_config.json spells special tokens as a string or {"content": ...}."""
    return entry.get("content") if isinstance(entry, dict) else entry


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


def _read_json(path: str) -> dict[str, Any]:
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def chat_template_environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    """The jinja2 environment chat templates are parsed and rendered in (transformers'
    syntax settings: ``trim_blocks``, ``lstrip_blocks``, loop controls)."""
    return jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])


class Tokenizer:
    """Text ↔ token ids for one model.

    Attributes: ``backend`` (the ``tokenizers.Tokenizer``), ``bos_token_id`` (int or
    None), ``eos_token_ids`` (tuple of ints: generation stops at any of them),
    ``chat_template`` (jinja2 source or None), ``vocab_size``.
    """

    def __init__(self, backend: tokenizers.Tokenizer, *, bos_token_id: int | None,
                 eos_token_ids: Iterable[int], chat_template: str | None = None):
        self.backend = backend
        self.bos_token_id = bos_token_id
        self.eos_token_ids = tuple(dict.fromkeys(eos_token_ids))
        self.chat_template = chat_template

    @classmethod
    def from_gguf_metadata(cls, metadata: Mapping[str, Any], source: str = "GGUF") -> "Tokenizer":
        """The tokenizer of a GGUF file from its ``tokenizer.ggml.*`` metadata:
        ``model`` ``gpt2`` is byte-level BPE (``pre``, ``merges``), ``llama`` is
        SentencePiece BPE (``scores``, ``add_space_prefix``, ``unknown_token_id``);
        both read ``tokens``, ``token_type`` (control tokens become special tokens,
        user-defined ones added tokens), ``bos/eos/eot/eom_token_id``,
        ``add_bos_token`` (default: false for gpt2, true for llama, as llama.cpp) and
        ``tokenizer.chat_template``.
        Raises ValueError (naming ``source`` and the key) for other tokenizer models,
        unknown pre-tokenizers, missing keys or per-token arrays of the wrong length."""
        model = _require(metadata, "tokenizer.ggml.model", source)
        if model not in _GGUF_MODELS:
            raise ValueError(f"[tokenizer] {source}: tokenizer.ggml.model is '{model}'; supported: "
                             f"'gpt2' (byte-level BPE), 'llama' (SentencePiece BPE)")
        build_backend, bos_by_default = _GGUF_MODELS[model]
        tokens = _require(metadata, "tokenizer.ggml.tokens", source)
        for key in ("bos", "eos", "eot", "eom", "unknown"):
            token_id = metadata.get(f"tokenizer.ggml.{key}_token_id")
            if token_id is not None and not 0 <= token_id < len(tokens):
                raise ValueError(f"[tokenizer] {source}: tokenizer.ggml.{key}_token_id is "
                                 f"{token_id}, outside the vocabulary of {len(tokens)} tokens")
        backend = build_backend(metadata, tokens, source)

        types = metadata.get("tokenizer.ggml.token_type", ())
        backend.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                                    for i, t in enumerate(types) if t == _TOKEN_CONTROL])
        backend.add_tokens([AddedToken(tokens[i], normalized=False)
                            for i, t in enumerate(types) if t == _TOKEN_USER_DEFINED])

        bos = metadata.get("tokenizer.ggml.bos_token_id")
        if bos is not None and metadata.get("tokenizer.ggml.add_bos_token", bos_by_default):
            backend.post_processor = processors.TemplateProcessing(
                single=f"{tokens[bos]} $A", pair=f"{tokens[bos]} $A $B",
                special_tokens=[(tokens[bos], bos)])
        # Generation also ends at end-of-turn / end-of-message tokens, as in llama.cpp.
        eos = [i for key in ("eos", "eot", "eom")
               for i in _ids(metadata.get(f"tokenizer.ggml.{key}_token_id"))]
        return cls(backend, bos_token_id=bos, eos_token_ids=eos,
                   chat_template=metadata.get("tokenizer.chat_template"))

    @classmethod
    def from_directory(cls, directory: str | os.PathLike) -> "Tokenizer":
        """A Hugging Face model directory: ``tokenizer.json``, plus ``tokenizer_config.json``
        (bos/eos tokens, ``chat_template``), ``chat_template.jinja``, and the eos ids of
        ``config.json`` / ``generation_config.json``. Raises ValueError when
        ``tokenizer.json`` is missing or the library cannot read it."""
        directory = os.fspath(directory)
        path = os.path.join(directory, "tokenizer.json")
        if not os.path.exists(path):
            raise ValueError(f"[tokenizer] {directory}: missing tokenizer.json")
        try:
            backend = tokenizers.Tokenizer.from_file(path)
        except Exception as e:   # tokenizers' own errors are Exception itself
            raise ValueError(f"[tokenizer] {path}: {e}") from None
        tok_config = _read_json(os.path.join(directory, "tokenizer_config.json"))
        config = _read_json(os.path.join(directory, "config.json"))
        gen_config = _read_json(os.path.join(directory, "generation_config.json"))

        def token_id(key: str) -> list[int]:
            content = _token_content(tok_config.get(key))
            tid = backend.token_to_id(content) if content else None
            return [] if tid is None else [tid]

        bos = token_id("bos_token") or _ids(config.get("bos_token_id"))
        eos = (token_id("eos_token") + _ids(config.get("eos_token_id"))
               + _ids(gen_config.get("eos_token_id")))
        template = tok_config.get("chat_template")
        if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
            template = {t["name"]: t["template"] for t in template}.get("default")
        jinja_path = os.path.join(directory, "chat_template.jinja")
        if template is None and os.path.exists(jinja_path):
            with open(jinja_path, encoding="utf-8") as f:
                template = f.read()
        return cls(backend, bos_token_id=bos[0] if bos else None, eos_token_ids=eos,
                   chat_template=template)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens`` adds the model's BOS when the
        tokenizer asks for one (SmolLM2 does not)."""
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of ``ids``; bytes that do not form complete UTF-8 become U+FFFD."""
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]],
                            add_generation_prompt: bool = True,
                            tools: Sequence[Mapping[str, Any]] | None = None,
                            **template_kwargs: Any) -> str:
        """Render ``messages`` (``[{"role": ..., "content": ...}, ...]``) with the model's
        jinja2 chat template; returns the prompt text, special tokens spelled out (encode
        it with ``add_special_tokens=False``). ``tools`` (OpenAI tool objects) and
        ``template_kwargs`` (e.g. ``enable_thinking``) are template variables, as in
        transformers' ``apply_chat_template``. Raises ValueError when the tokenizer has
        no chat template, or the template raises or fails to parse or render (a
        malformed template, a variable of the wrong type)."""
        if not self.chat_template:
            raise ValueError("[apply_chat_template] this tokenizer has no chat template")
        env = chat_template_environment()

        def raise_exception(message: str):
            raise ValueError(f"[apply_chat_template] {message}")

        def tojson(value: Any, indent: int | None = None, separators=None,
                   sort_keys: bool = False) -> str:
            # transformers' filter: plain JSON, non-ASCII kept (jinja2's escapes HTML).
            return json.dumps(value, ensure_ascii=False, indent=indent,
                              separators=separators, sort_keys=sort_keys)

        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        env.filters["tojson"] = tojson
        special = {
            "bos_token": self.id_to_token(self.bos_token_id) if self.bos_token_id is not None else "",
            "eos_token": self.id_to_token(self.eos_token_ids[0]) if self.eos_token_ids else "",
        }
        try:
            return env.from_string(self.chat_template).render(
                **{**special, **template_kwargs}, messages=list(messages), tools=tools,
                add_generation_prompt=add_generation_prompt)
        except ValueError as e:
            if str(e).startswith("[apply_chat_template]"):
                raise
            raise ValueError(f"[apply_chat_template] the chat template failed: {e}") from e
        except Exception as e:   # noqa: BLE001 - a template is data: any error it makes
            raise ValueError(f"[apply_chat_template] the chat template failed: "
                             f"{type(e).__name__}: {e}") from e

    def detokenizer(self) -> "StreamingDetokenizer":
        return StreamingDetokenizer(self)


class StreamingDetokenizer:
    """Turns generated token ids into text pieces as they arrive without ever emitting
    part of a UTF-8 character.

    A token may carry only some bytes of a character (a byte-level BPE token can end in
    the middle of an emoji), in which case decoding the pending ids ends in U+FFFD; such
    text is held back until a later token completes the character. The pending ids are
    decoded together, so text already emitted never changes. With a byte-level decoder,
    text decodes piecewise at character boundaries, so the pending ids are dropped once
    their text is out (constant cost per token); other decoders (SentencePiece's
    leading-space rule) see every id since the start.
    """

    def __init__(self, tokenizer: Tokenizer):
        self._tokenizer = tokenizer
        self._piecewise = isinstance(tokenizer.backend.decoder, decoders.ByteLevel)
        self._ids: list[int] = []
        self._emitted = 0  # characters of decode(self._ids) already returned

    def add_token(self, token_id: int) -> str:
        """Add one token; returns the newly completed text (possibly empty)."""
        self._ids.append(int(token_id))
        text = self._tokenizer.decode(self._ids)
        if text.endswith("\ufffd"):
            return ""
        return self._take(text)

    def finalize(self) -> str:
        """The text still held back (an incomplete character at the end becomes U+FFFD)."""
        return self._take(self._tokenizer.decode(self._ids))

    def _take(self, text: str) -> str:
        new = text[self._emitted:]
        if self._piecewise:
            self._ids, self._emitted = [], 0
        else:
            self._emitted = len(text)
        return new
