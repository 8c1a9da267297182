"""One forward step's inputs as host arrays, cut into micro-batches of whole
sequences, and put back on a device: what travels between the engine and the stages of
a pipeline (``pipeline.model``)."""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from ..cache import StepBuffers, StepInputs

# StepInputs' tensors indexed by token (rows of T) and by sequence (rows of B).
_TOKEN_FIELDS = ("token_ids", "positions", "slot_mapping", "window_slots", "rope_rows")
_SEQUENCE_FIELDS = ("block_tables", "seq_lens", "state_slots", "window_tables")


def host_arrays(step: StepInputs) -> Dict[str, Optional[np.ndarray]]:
    """``step``'s tensors as numpy arrays (absent ones None), ``logit_rows`` always
    explicit (int32 [R]: None in a StepInputs stands for every row or none), and its
    ``decode_rows`` as a bool array of no dimension (the stages run the step on the
    arithmetic the engine chose for it)."""
    arrays = {name: None if getattr(step, name) is None else getattr(step, name).numpy()
              for name in (*_TOKEN_FIELDS, *_SEQUENCE_FIELDS, "query_start_loc")}
    tokens = arrays["token_ids"].shape[0]
    if step.logit_rows is not None:
        arrays["logit_rows"] = step.logit_rows.numpy()
    else:
        arrays["logit_rows"] = np.arange(tokens if step.num_logit_rows else 0, dtype=np.int32)
    arrays["decode_rows"] = np.asarray(step.decode_rows)
    return arrays


def split(arrays: Dict[str, Optional[np.ndarray]], parts: int) -> List[dict]:
    """``arrays`` (``host_arrays``) cut into at most ``parts`` micro-batches of
    consecutive whole sequences with about equal token counts (fewer when the step has
    fewer sequences); their logit rows, in order, are the step's. ValueError for
    ``parts`` < 1."""
    if parts < 1:
        raise ValueError(f"[pipeline] micro_batches must be >= 1, got {parts}")
    starts = arrays["query_start_loc"].astype(np.int64)
    sequences, tokens = starts.shape[0] - 1, int(starts[-1])
    # The first sequence boundary at or past each k/parts of the tokens.
    cuts = np.searchsorted(starts, [tokens * k / parts for k in range(1, parts)])
    bounds = sorted({0, sequences, *(int(c) for c in cuts if 0 < c < sequences)})
    batches = []
    for b0, b1 in zip(bounds, bounds[1:]):
        t0, t1 = int(starts[b0]), int(starts[b1])
        batch = {name: None if arrays[name] is None else arrays[name][t0:t1]
                 for name in _TOKEN_FIELDS}
        batch.update({name: None if arrays[name] is None else arrays[name][b0:b1]
                      for name in _SEQUENCE_FIELDS})
        batch["query_start_loc"] = (starts[b0:b1 + 1] - t0).astype(np.int32)
        rows = arrays["logit_rows"]
        batch["logit_rows"] = (rows[(rows >= t0) & (rows < t1)] - t0).astype(np.int32)
        batch["decode_rows"] = arrays["decode_rows"]   # a row's arithmetic is its own
        batches.append(batch)
    return batches


def step_inputs(arrays: Dict[str, Optional[np.ndarray]], buffers: StepBuffers) -> StepInputs:
    """The StepInputs of ``arrays`` (``host_arrays``/``split``) in ``buffers`` on their
    device: the tensors ``cache.build_step`` would have made for these sequences."""
    up = {name: None if value is None else buffers.write(name, value)
          for name, value in arrays.items() if name not in ("logit_rows", "decode_rows")}
    rows, tokens = arrays["logit_rows"], arrays["token_ids"].shape[0]
    return StepInputs(
        **up,
        logit_rows=None if len(rows) in (0, tokens) else buffers.write("logit_rows", rows),
        num_logit_rows=len(rows),
        max_position=int(arrays["positions"].max()),
        decode_rows=bool(arrays["decode_rows"]))
