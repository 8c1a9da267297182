"""The flattened batch of one forward step, in vLLM's layout.

All requests of a step are concatenated along one token axis T: request b owns the
rows ``query_start_loc[b] .. query_start_loc[b + 1]``. A prefill contributes its
prompt (or a chunk of it), a decode contributes one token, so prefill and decode of
different requests run in the same forward pass.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

import metalrt

from .blocks import BLOCK_SIZE


@dataclass(frozen=True)
class StepInputs:
    """Device tensors of one forward step.

    token_ids int32 [T]; positions int32 [T] (0-based position of each token in its
    sequence); slot_mapping int64 [T] (cache slot = block * 16 + offset);
    block_tables int32 [B, max_blocks]; seq_lens int32 [B] (context length including
    this step's tokens); query_start_loc int32 [B + 1]; logit_rows int32 [R] (rows of
    T whose logits are wanted; None = all T rows); num_logit_rows: R (0 = no logits
    this step, e.g. a step of prompt chunks only); max_position: the largest entry of
    positions, kept on the host so position tables can grow ahead of use;
    state_slots int32 [B]: each sequence's slot in the recurrent-state pools (models
    with Gated-DeltaNet layers, ``cache.recurrent``); window_tables int32 [B, max_blocks]
    and window_slots int64 [T]: the block tables and cache slots of the sliding-window
    layers' own pool (``cache.window``; -1 entries for blocks out of the window), None
    when no layer has one; rope_rows int32 [T]: each token's row in a LongRoPE model's
    two-set cos|sin table (its position, plus the original context for a sequence on
    the long factors: ``Rope.long_rope_table``), None when no chunk is on the long
    factors (the step's largest position then picks the set); decode_rows: the step runs
    on decode rows' arithmetic (``ops.decode_rows``: each row as a one-row decode computes
    it), host-side; derived: tensors that
    every layer would otherwise compute again from these inputs, made by the first
    layer that needs them and kept for this step only (RoPE's cos|sin rows of the
    step's tokens, keyed by their maker).
    """

    token_ids: "metalrt.Tensor"
    positions: "metalrt.Tensor"
    slot_mapping: "metalrt.Tensor"
    block_tables: "metalrt.Tensor"
    seq_lens: "metalrt.Tensor"
    query_start_loc: "metalrt.Tensor"
    logit_rows: Optional["metalrt.Tensor"]
    num_logit_rows: int
    max_position: int
    state_slots: Optional["metalrt.Tensor"] = None
    window_tables: Optional["metalrt.Tensor"] = None
    window_slots: Optional["metalrt.Tensor"] = None
    rope_rows: Optional["metalrt.Tensor"] = None
    decode_rows: bool = False
    derived: Dict = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class ScheduledChunk:
    """New tokens of one sequence, starting at position ``start`` (the number of its
    tokens already in the cache), with the sequence's block table. ``logits`` says
    which of its rows need logits: "last" (the next token is sampled), "all" (a
    whole-prompt scoring pass) or "none" (a prompt chunk that is not the last).
    ``state_slot``: the sequence's recurrent-state slot (0 for a one-off pass over a
    fresh cache); ``window_table``: its table in the sliding-window layers' own pool
    (``cache.window``, as long as ``block_table``), None for a cache without one;
    ``rope_offset``: added to its positions for their rows in a LongRoPE model's RoPE
    table (the model's ``rope_switch`` for a sequence on the long factors, else 0)."""

    token_ids: Sequence[int]
    start: int
    block_table: Sequence[int]
    logits: str = "last"
    state_slot: int = 0
    window_table: Optional[Sequence[int]] = None
    rope_offset: int = 0


class StepBuffers:
    """Persistent device tensors that the inputs of every step are written into, so
    that a warmed-up step allocates nothing (the bench counters gate 0 bytes). Each
    field is a flat buffer that grows (to the next power of two) only when a step
    needs more room; a step gets contiguous views of its prefix. Writing is a host
    write (``copy_from``): on Metal it first waits for pending GPU work, which at the
    start of a step has already ended with the previous step's read of its sampled
    tokens."""

    _DTYPES = {"token_ids": np.int32, "positions": np.int32, "slot_mapping": np.int64,
               "block_tables": np.int32, "seq_lens": np.int32, "query_start_loc": np.int32,
               "logit_rows": np.int32, "state_slots": np.int32, "window_tables": np.int32,
               "window_slots": np.int64, "rope_rows": np.int32}

    def __init__(self, device: str):
        self.device = device
        self._buffers = {}

    def write(self, name: str, values: np.ndarray) -> "metalrt.Tensor":
        """A view of the persistent buffer ``name`` holding ``values`` (any shape)."""
        values = np.ascontiguousarray(values, dtype=self._DTYPES[name])
        buffer = self._buffers.get(name)
        if buffer is None or buffer.shape[0] < values.size:
            capacity = 1 << max(4, (values.size - 1).bit_length())
            buffer = self._buffers[name] = metalrt.empty(capacity, values.dtype, self.device)
        view = buffer[:values.size].reshape(values.shape)
        view.copy_from(values)
        return view


# Chunks of at most this many tokens (decodes, verify steps of up to 15 drafts, short
# prompt chunks) run on decode rows' arithmetic (``ops.decode_rows``): past it a prefill's
# GEMMs and attention are worth their batch-dependent blocking.
DECODE_CHUNK_TOKENS = 16


def decode_row_passes(chunks: Sequence[ScheduledChunk],
                      decode: Optional[Sequence[bool]] = None) -> List[Tuple[List[int], bool]]:
    """The forward passes that run ``chunks`` so that no decode row shares one with a
    prefill's GEMMs: (indices into ``chunks``, decode_rows) for the chunks of at most
    ``DECODE_CHUNK_TOKENS`` tokens and those ``decode`` marks (a verify step of more
    drafts), then for the rest; each in order, an empty one left out."""
    short = [len(c.token_ids) <= DECODE_CHUNK_TOKENS or (decode is not None and decode[i])
             for i, c in enumerate(chunks)]
    passes = [([i for i, s in enumerate(short) if s == kind], kind) for kind in (True, False)]
    return [(indices, decode_rows) for indices, decode_rows in passes if indices]


def build_step(chunks: Sequence[ScheduledChunk], device: str,
               buffers: Optional[StepBuffers] = None,
               decode_rows: Optional[bool] = None) -> StepInputs:
    """Flattens scheduled chunks into the device tensors of one forward step: views of
    ``buffers`` when given (an engine's steps), else new tensors. ``decode_rows``
    (``StepInputs.decode_rows``): None gives it to a step whose every chunk has at most
    ``DECODE_CHUNK_TOKENS`` tokens.

    Raises ValueError when a chunk is empty or its block table is too short for it.
    """
    if not chunks:
        raise ValueError("[build_step] a step needs at least one scheduled sequence")
    ids, positions, slots, seq_lens, starts, rows = [], [], [], [], [0], []
    max_blocks = max(len(c.block_table) for c in chunks)
    tables = np.zeros((len(chunks), max(max_blocks, 1)), dtype=np.int32)
    windowed = chunks[0].window_table is not None
    if any((c.window_table is not None) != windowed for c in chunks):
        raise ValueError("[build_step] every chunk of a step needs a window table, or none")
    window_tables = np.full(tables.shape, -1, dtype=np.int32) if windowed else None
    window_slots, rope_rows = [], []
    for b, chunk in enumerate(chunks):
        n = len(chunk.token_ids)
        end = chunk.start + n
        if n == 0 or end > len(chunk.block_table) * BLOCK_SIZE:
            raise ValueError(f"[build_step] chunk of {n} tokens at {chunk.start} does not fit "
                             f"{len(chunk.block_table)} blocks")
        pos = np.arange(chunk.start, end)
        table = np.asarray(chunk.block_table, dtype=np.int64)
        ids.append(np.asarray(chunk.token_ids, dtype=np.int32))
        positions.append(pos)
        rope_rows.append(pos + chunk.rope_offset)
        slots.append(table[pos // BLOCK_SIZE] * BLOCK_SIZE + pos % BLOCK_SIZE)
        tables[b, :len(table)] = table
        if windowed:
            window = np.asarray(chunk.window_table, dtype=np.int64)
            if len(window) != len(table) or (window[pos // BLOCK_SIZE] < 0).any():
                raise ValueError(f"[build_step] the window table of a chunk at {chunk.start} has "
                                 "no block for a token it writes")
            window_tables[b, :len(window)] = window
            window_slots.append(window[pos // BLOCK_SIZE] * BLOCK_SIZE + pos % BLOCK_SIZE)
        seq_lens.append(end)
        starts.append(starts[-1] + n)
        if chunk.logits == "last":
            rows.append(starts[-1] - 1)
        elif chunk.logits == "all":
            rows.extend(range(starts[-2], starts[-1]))
    all_positions = np.concatenate(positions)

    def up(name, array):
        if buffers is not None:
            return buffers.write(name, array)
        return metalrt.asarray(np.ascontiguousarray(array, dtype=StepBuffers._DTYPES[name]),
                               device=device)

    return StepInputs(
        token_ids=up("token_ids", np.concatenate(ids)),
        positions=up("positions", all_positions),
        slot_mapping=up("slot_mapping", np.concatenate(slots)),
        block_tables=up("block_tables", tables),
        seq_lens=up("seq_lens", seq_lens),
        query_start_loc=up("query_start_loc", starts),
        logit_rows=None if len(rows) == starts[-1] else (up("logit_rows", rows) if rows else None),
        num_logit_rows=len(rows),
        max_position=int(all_positions.max()),
        state_slots=up("state_slots", [c.state_slot for c in chunks]),
        window_tables=up("window_tables", window_tables) if windowed else None,
        window_slots=up("window_slots", np.concatenate(window_slots)) if windowed else None,
        rope_rows=up("rope_rows", np.concatenate(rope_rows))
        if any(c.rope_offset for c in chunks) else None,
        decode_rows=all(len(c.token_ids) <= DECODE_CHUNK_TOKENS for c in chunks)
        if decode_rows is None else bool(decode_rows),
    )
