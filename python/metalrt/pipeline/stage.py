"""One stage of a pipeline-parallel model: a process holding a range of the model's
layers and their KV cache (a Ray actor, ``pipeline.model``)."""
from __future__ import annotations

import os
from typing import Optional, Tuple

import numpy as np

import metalrt

from ..cache import StepBuffers
from ..loaders import file_map
from . import micro_batches


def memory_status() -> dict:
    """This process's resident set now (VmRSS) and at its peak (VmHWM), in bytes
    (Linux's /proc/self/status; {} elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f)
    except OSError:
        return {}
    return {key: int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "VmHWM")}


def mapped_file_rss(path: str) -> int:
    """Bytes of the file at ``path`` resident in this process's mappings of it (the
    pages of it that were read), from Linux's /proc/self/smaps (0 elsewhere)."""
    target, total, inside = os.path.realpath(path), 0, False
    try:
        with open("/proc/self/smaps") as f:
            for line in f:
                fields = line.split()
                if "-" in fields[0] and not fields[0].endswith(":"):   # a mapping's header
                    inside = len(fields) >= 6 and fields[5] == target
                elif inside and fields[0] == "Rss:":
                    total += int(fields[1]) * 1024
    except OSError:
        return 0
    return total


class PipelineStage:
    """Layers ``layers`` = (start, stop) of the model at ``path`` (``metalrt.load``) on
    ``device``, with a KV cache of ``num_blocks`` blocks for them. The file is mapped
    (``file_map.mapped``), so the stage's resident weights are its own layers' pages
    only."""

    def __init__(self, path: Optional[str], layers: Tuple[int, int], device: str, dtype: str,
                 num_blocks: int):
        self.rss_before_load = memory_status().get("VmRSS")
        with file_map.mapped():
            self.model, _ = metalrt.load(path, device=device, dtype=dtype, verbose=False,
                                         layers=layers)
        self.cache = self.model.new_cache(num_blocks, window_blocks=None)
        self.buffers = StepBuffers(self.model.device)

    def forward(self, arrays: dict, hidden: Optional[np.ndarray]) -> Optional[np.ndarray]:
        """One micro-batch (``micro_batches.split``) through this stage's layers:
        ``hidden`` [T, hidden_size] from the previous stage (None for the first).
        Returns hidden states [T, hidden_size] in the model's dtype, or from the last
        stage float32 logits [R, vocab] of the micro-batch's logit rows (None for R = 0)."""
        model = self.model
        step = micro_batches.step_inputs(arrays, self.buffers)
        h = None if hidden is None else metalrt.asarray(hidden, device=model.device,
                                                        dtype=model.dtype)
        out = model.forward(step, self.cache, hidden=h)
        return None if out is None else out.numpy()

    def rope_switch(self) -> Optional[int]:
        """The model's LongRoPE switch (``CausalLM.rope_switch``: the original context;
        None for other RoPE), which the engine's scheduler recomputes requests at."""
        return self.model.rope_switch

    def reset_cache(self, num_blocks: int) -> None:
        """A new KV cache of ``num_blocks`` blocks (the engine's cache size)."""
        if num_blocks != self.cache.num_blocks:
            self.cache = self.model.new_cache(num_blocks, window_blocks=None)

    def cpu_seconds(self) -> float:
        """User + system CPU seconds this stage's process has run (every thread)."""
        times = os.times()
        return times.user + times.system

    def memory(self) -> dict:
        """``memory_status`` of this stage's process (bytes), its pid, its layers, the
        resident set before the model loaded (``rss_before_load``) and the bytes of the
        model file resident in it (``mapped_file_rss``: the weights it read)."""
        return {**memory_status(), "pid": os.getpid(), "rss_before_load": self.rss_before_load,
                "layers": (self.model.layer_start, self.model.layer_stop),
                "file_rss": mapped_file_rss(self.model.source)}
