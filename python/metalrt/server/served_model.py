"""One loaded model of the server: its engine loop and what its requests are rendered
and parsed with (tokenizer, chat template, tool-call parser, grammar compiler)."""
from __future__ import annotations

from . import grammar, harmony
from .engine_loop import EngineLoop
from .tool_parsers import parser_for, template_knows_tools


def cache_bytes(cache) -> int:
    """Bytes of a ModelCache's tensors (paged K/V, recurrent state) of every layer."""
    return sum(value.nbytes for layer in cache.layers for value in vars(layer).values()
               if hasattr(value, "nbytes"))


class ServedModel:
    """``engine_loop`` served as ``id``; ``weight_bytes``: its weight files' size.
    ``reasoning_format`` as ``create_app`` takes it. ``memory_bytes``: weights plus the
    KV cache the engine holds; ``busy``: requests are queued or running. ``harmony``:
    for a model that speaks harmony (gpt-oss) the directory of its o200k vocabulary
    (``harmony.served_vocab``; its prompts are rendered and its replies parsed by
    openai-harmony), else None. ``release``: called once the engine loop has stopped
    (a pipeline's ``close``: its stage processes end)."""

    def __init__(self, id: str, engine_loop: EngineLoop, weight_bytes: int,
                 reasoning_format: str = "auto", release=None):
        self.id, self.engine_loop, self.release = id, engine_loop, release
        self.model, self.tokenizer = engine_loop.model, engine_loop.tokenizer
        self.vocab_size = engine_loop.model.vocab_size
        self.grammars = grammar.GrammarCompiler(self.tokenizer, self.vocab_size)
        template = self.tokenizer.chat_template
        self.parser, self.knows_tools = parser_for(template), template_knows_tools(template)
        self.harmony = harmony.served_vocab(self.model.arch, self.tokenizer)
        self.reasoning = reasoning_format == "deepseek" or (
            reasoning_format == "auto" and "<think>" in (template or ""))
        self.memory_bytes = weight_bytes + cache_bytes(engine_loop.engine.cache)

    @property
    def busy(self) -> bool:
        return self.engine_loop.busy

    def close(self) -> None:
        self.engine_loop.close()
        if self.release is not None:
            self.release()
