"""Plans: a step's op calls recorded once and replayed from C++.

While a plan records (``with plan.record():``), every op called on the recording
thread runs as usual and is kept: the op, the provider that served it, its input and
output tensors and parameters. ``replay()`` reruns those calls in order from C++ —
one Python call for the whole step instead of one per op, no output allocation, no
provider search (``cpp/include/metalrt/plan.h``). So what changes between steps must
live in tensors the recording used: write new values into them with
:func:`write_inputs`, replay, and read the recorded outputs with :func:`read_output`.

A plan holds every tensor it recorded (none can be freed under it); ``release()``
drops them. The decode runner keeps a few plans keyed by what changes a step's shapes
(``metalrt.runner.decode_plans``). Index values are not rechecked by a replay (the op
entry points checked them when recording): write valid ones.

Errors: RuntimeError for a replay of a plan that is not recorded (empty, failed or
released) or while another plan records on the thread, and for a second recording;
ValueError for an op on another device than the plan's during a recording (the plan
is then failed) and for write_inputs / read_output misuse (shape, layout), TypeError
for a wrong element type.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Iterator, List, Tuple

import numpy as np

from . import _metalrt
from ._metalrt import Tensor


class Plan:
    """A recorded step on ``device`` ("cpu" or "metal"). ``first_commit_ops``: on
    Metal, a replay commits its first command buffer after this many ops so the GPU
    starts at once (0: no early commit); it always commits the rest before it returns
    and never waits."""

    def __init__(self, device: str, first_commit_ops: int = 4):
        self._native = _metalrt.Plan(device, int(first_commit_ops))

    @contextmanager
    def record(self) -> Iterator["Plan"]:
        """Records the op calls made inside the ``with`` block (they also run). The
        plan is failed, never replayable, when the block raises."""
        self._native.begin_record()
        try:
            yield self
        except BaseException:
            self._native.end_record(False)
            raise
        self._native.end_record()

    def replay(self) -> None:
        """Reruns the recorded op calls over the recorded tensors."""
        self._native.replay()

    def release(self) -> None:
        """Drops the recorded calls and the tensors they hold; replay then raises."""
        self._native.release()

    @property
    def state(self) -> str:
        """"empty", "recording", "ready", "failed" or "released"."""
        return self._native.state

    @property
    def ops(self) -> List[str]:
        """The recorded op names, in call order."""
        return self._native.ops

    @property
    def replays(self) -> int:
        return self._native.replays

    def __len__(self) -> int:
        return len(self._native)


def write_inputs(pairs: Iterable[Tuple[Tensor, np.ndarray]]) -> None:
    """Writes each C-contiguous numpy array into its contiguous tensor (same shape,
    the element type ``Tensor.numpy()`` gives; not bfloat16), in one call. On Metal it
    waits only for submitted work that reads or writes those tensors, not for a later
    step already committed. Every pair is checked before anything is written."""
    _metalrt.write_inputs(list(pairs))


def read_output(tensor: Tensor) -> np.ndarray:
    """A numpy copy of a contiguous tensor (not bfloat16), after waiting only for the
    submitted work that writes it (a plan's output while a later step keeps running)."""
    return _metalrt.read_output(tensor)
