"""One generation request: its tokens, cache blocks, sampler and stop conditions."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import FrozenSet, List, Optional

from .sampling import Sampler, SamplingParams


@dataclass(eq=False)
class Request:
    """``num_computed`` counts the tokens whose K/V are in the cache; the tokens after
    it are fed in the next step (the prompt, or the last sampled token).
    ``num_cached_tokens``: prompt tokens found in the prefix cache at admission (not
    prefilled); ``block_keys``: prefix keys of the request's full blocks so far;
    ``state_slot``: its recurrent-state slot while running (hybrid models), else None;
    ``speculative``: its decode steps verify drafted tokens (the engine's
    ``speculative`` config); ``draft``: the tokens drafted for its next step;
    ``rope_offset``: the model's ``rope_switch`` while the request is on LongRoPE's long
    factors (``ScheduledChunk.rope_offset``), else 0."""

    request_id: int
    prompt: List[int]
    params: SamplingParams
    max_tokens: int
    eos_ids: FrozenSet[int]
    output: List[int] = field(default_factory=list)
    blocks: List[int] = field(default_factory=list)
    num_computed: int = 0
    num_cached_tokens: int = 0
    block_keys: List[bytes] = field(default_factory=list)
    state_slot: Optional[int] = None
    finish_reason: Optional[str] = None
    speculative: bool = False
    draft: List[int] = field(default_factory=list)
    restore_state: Optional[list] = None   # the checkpoint its cached prefix ends with
    # Sliding-window layers' own pool (cache.window): the table (-1: no block), the
    # blocks reserved for the request, the first entry not dropped yet.
    window_blocks: Optional[List[int]] = None
    window_reserve: int = 0
    window_first: int = 0
    rope_offset: int = 0

    def __post_init__(self):
        if not self.prompt:
            raise ValueError("[runner] the prompt must contain at least one token")
        if self.max_tokens < 1:
            raise ValueError(f"[runner] max_tokens must be >= 1, got {self.max_tokens}")
        self.sampler = Sampler(self.params)

    @property
    def tokens(self) -> List[int]:
        return self.prompt + self.output

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def max_cached_tokens(self) -> int:
        """Cache rows the request can ever use: the last sampled token is not fed back."""
        return len(self.prompt) + self.max_tokens - 1

    def append(self, token: int) -> None:
        """Records a sampled token and applies the token-level stop conditions: an eos
        id finishes with "stop", reaching max_tokens with "length"."""
        self.output.append(token)
        if token in self.eos_ids:
            self.finish_reason = "stop"
        elif len(self.output) >= self.max_tokens:
            self.finish_reason = "length"
