"""Grammar-constrained decoding with llguidance: JSON schemas, JSON objects and the
Lark grammars of forced tool calls, as a logits processor of the runner's sampler.

Why llguidance (docs/serving.md has the measurement, ``python -m bench.grammar_mask``):
on a 151,936-token vocabulary xgrammar computes a JSON-schema mask faster (about 9 us a
token against llguidance's 90), but both are a small part of a decode step, llguidance
compiles a schema ten times faster (the compile is in the request's time to first
token), its Lark grammars embed JSON schemas (``%json``), which is what a forced tool
call in a model's own syntax needs, and it depends on nothing (xgrammar requires torch,
triton and transformers).

The mask is applied where the logits are: a constrained request samples on the host
(its logits are read back every step, the one host wait a sampled step has), and its
processor computes the next token's bitmask from the tokens sampled so far and sets the
logits of the tokens the grammar refuses to -inf.
"""
from __future__ import annotations

import json
from typing import Any, Optional, Sequence

import numpy as np

# Compact separators and no free whitespace: a small model given the freedom can emit
# whitespace until max_tokens; this is the JSON a client reads anyway.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def styled(schema: Any) -> dict:
    """``schema`` (a JSON schema object) with the server's JSON style; ValueError when
    it is not an object."""
    if not isinstance(schema, dict):
        raise ValueError(f"a JSON schema must be an object, got {type(schema).__name__}")
    return {**schema, "x-guidance": {**JSON_STYLE, **schema.get("x-guidance", {})}}


def json_schema_grammar(schema: Any) -> str:
    """The llguidance grammar of JSON documents valid for ``schema``."""
    import llguidance

    return llguidance.LLMatcher.grammar_from_json_schema(styled(schema))


def lark_json(schema: Any) -> str:
    """A Lark expression matching JSON valid for ``schema``."""
    return "%json " + json.dumps(styled(schema))


class GrammarCompiler:
    """Compiles grammars for one tokenizer. ``vocab_size`` is the width of the model's
    logits (it may exceed the tokenizer's: the extra ids are never allowed)."""

    def __init__(self, tokenizer, vocab_size: int):
        self.tokenizer, self.vocab_size = tokenizer, vocab_size
        self._lltokenizer = None

    @property
    def lltokenizer(self):
        # Built on first use (~0.2 s for 49k tokens): a server that never sees a
        # constrained request does not pay for it.
        if self._lltokenizer is None:
            import llguidance

            self._lltokenizer = llguidance.LLTokenizer(
                self.tokenizer.backend.to_str(), n_vocab=self.vocab_size,
                eos_token=list(self.tokenizer.eos_token_ids))
        return self._lltokenizer

    def processor(self, grammar: str) -> "GrammarProcessor":
        """A fresh processor for one request. Raises ValueError with llguidance's
        message when the grammar (or the schema it came from) is invalid."""
        import llguidance

        error = llguidance.LLMatcher.validate_grammar(grammar)
        if error:
            raise ValueError(error)
        matcher = llguidance.LLMatcher(self.lltokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return GrammarProcessor(matcher, self.vocab_size,
                                self.tokenizer.eos_token_ids)


class GrammarProcessor:
    """``f(output_ids, logits) -> logits`` for ``SamplingParams.logits_processors``:
    consumes the tokens sampled since its last call, then masks ``logits`` [V] float32
    to the tokens the grammar allows next. Once the grammar is complete (or, should it
    ever be, in error) only the eos tokens remain."""

    def __init__(self, matcher, vocab_size: int, eos_ids: Sequence[int]):
        self.matcher, self.vocab_size = matcher, vocab_size
        self.eos = np.asarray(list(eos_ids), dtype=np.int64)
        self.bitmask = np.full((vocab_size + 31) // 32, -1, dtype=np.int32)
        self.consumed = 0

    def __call__(self, output: Sequence[int], logits: np.ndarray) -> np.ndarray:
        for token in output[self.consumed:]:
            self.matcher.consume_token(int(token))
        self.consumed = len(output)
        if self.matcher.is_error():
            allowed = np.zeros(logits.shape[-1], dtype=bool)
            allowed[self.eos] = True
        else:
            self.matcher.unsafe_compute_mask_ptr(self.bitmask.ctypes.data, self.bitmask.nbytes)
            allowed = np.unpackbits(self.bitmask.view(np.uint8),
                                    bitorder="little")[:logits.shape[-1]].astype(bool)
        logits[~allowed] = -np.inf
        return logits

    @property
    def error(self) -> Optional[str]:
        return self.matcher.get_error() if self.matcher.is_error() else None
