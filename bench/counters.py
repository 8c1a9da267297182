"""Metal-path counters of the default model, from the profiler: one prefill step
and then decode steps, each measured alone. They are the Metal path's deterministic
figures, so they are measured on the simulated device too, where times are not.

Per step: command-buffer commits, in total and by cause (``commits_at_cap``: the
open command buffer reached the dispatch cap; ``commits_at_flush``: an explicit
``metalrt.flush``; ``commits_at_synchronize``: committed by the synchronize before a
host wait), host waits, dispatches (total and per decoder layer), device bytes newly
allocated (the buffer cache serves repeat sizes), and per op: the provider that
served it (a native Metal kernel or the CPU reference tier, which synchronises
first) with the waits, commits and dispatches made during its calls. Waits outside
every op are the runner's host reads (the sampled token ids) and writes (the step's
inputs). The counts are deterministic: they depend on the model and the code, not
on timing. Per step too, the profiler's kernel rows (``kernels``: dispatches,
threadgroups, SIMD-groups, the collectives of the busiest SIMD-group that the simulated
device counts), from which ``bench/parallelism.py`` reads the argmax's serial loads
per thread and the decode attention's proxies (``decode_attention``).

Run as a worker (``python -m bench.counters SPEC.json``, SPEC = {"gguf", "prompt",
"decode_steps"}), it loads the model on the Metal device in a fresh process, so the
byte counts do not depend on what ran before, and prints the result as a JSON line.

The goals they check: a decode step makes exactly one host wait (the read of the
sampled token), commits beyond one come only from the dispatch cap, and a decode step
after warm-up allocates 0 bytes. It is checked
by counting causes, not by a bound: in the warmed-up decode step every commit is at
the cap except exactly one, the synchronize before the host read of the sampled ids,
and none is at a flush (only a prefill flushes, once per layer). A step whose dispatch count were a
multiple of the cap would commit its last command buffer at the cap and synchronize
with nothing open (no synchronize commit); the goal then reads False, to be looked
at, rather than passing by a looser rule.
"""
from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from typing import Dict, List, Optional, Sequence

import metalrt
from metalrt import ops, profiler, providers
from metalrt.cache import BLOCK_SIZE, blocks_for
from metalrt.loaders.gguf_file import GGUFFile
from metalrt.runner import Engine, SamplingParams

from . import attention_grid, decode_estimate, decode_pipeline, parallelism, weight_bytes
from .generation import emit

DEFAULT_MAX_DISPATCHES = 48   # the command stream's cap unless METALRT_MAX_DISPATCHES is set
# The profiler's per-cause commit counters (they sum to "commits").
COMMIT_CAUSES = ("commits_at_cap", "commits_at_flush", "commits_at_synchronize")


def _totals() -> Dict[str, int]:
    total = next((r for r in profiler.rows() if r["name"] == "total"), None) or {}
    return {k: int(total.get(k, 0)) for k in ("commits", *COMMIT_CAUSES, "waits", "dispatches",
                                              "allocations", "allocated_bytes")}


def _delta(before: Dict[str, int], after: Dict[str, int]) -> Dict[str, int]:
    return {k: after[k] - before[k] for k in after}


def _kernel_threadgroups() -> Dict[str, int]:
    return {r["name"]: r["threadgroups"] for r in profiler.rows() if r["name"] != "total"}


class _Recorder:
    """Profiler deltas of every op call and of every decoder layer during one step, and
    the weight bytes the op calls read (``weight_bytes``), also by the kernel that read
    them (``kernel_bytes``: an op call's bytes go to the kernels it dispatched, shared
    by their threadgroups)."""

    def __init__(self, weights: Dict[int, object]):
        self.ops: Dict[str, Dict[str, int]] = {}
        self.layers: List[Dict[str, int]] = []
        self.weights, self.weight_bytes = weights, 0
        self.kernel_bytes: Dict[str, float] = {}
        self.deferred_bytes = []    # expert GEMMs: counted from their ids after the step

    def _credit(self, nbytes: int, before: Dict[str, int]) -> None:
        grown = {n: tgs - before.get(n, 0) for n, tgs in _kernel_threadgroups().items()}
        grown = {n: d for n, d in grown.items() if d > 0}
        for n, d in grown.items():
            self.kernel_bytes[n] = self.kernel_bytes.get(n, 0) + nbytes * d / sum(grown.values())

    def op(self, name, fn):
        def wrapped(*args, **kwargs):
            nbytes = 0
            if name == "moe_matmul_bt":
                self.deferred_bytes.append(weight_bytes.selected_expert_bytes(args, kwargs, self.weights))
            else:
                nbytes = weight_bytes.bytes_read(name, args, kwargs, self.weights)
                self.weight_bytes += nbytes
            before, tgs = _totals(), _kernel_threadgroups()
            result = fn(*args, **kwargs)
            d = _delta(before, _totals())
            self._credit(nbytes, tgs)
            row = self.ops.setdefault(name, {"calls": 0, "waits": 0, "commits": 0, "dispatches": 0})
            row["calls"] += 1
            for k in ("waits", "commits", "dispatches"):
                row[k] += d[k]
            return result
        return wrapped


class _Layer:
    def __init__(self, layer, recorder: _Recorder):
        self.layer, self.recorder = layer, recorder

    def __call__(self, *args):
        before = _totals()
        out = self.layer(*args)
        self.recorder.layers.append(_delta(before, _totals()))
        return out


@contextmanager
def _instrumented(model, recorder: _Recorder):
    names = list(ops.__all__)
    saved = {n: getattr(ops, n) for n in names}
    layers = model.layers
    try:
        for n in names:
            setattr(ops, n, recorder.op(n, saved[n]))
        model.layers = [_Layer(layer, recorder) for layer in layers]
        yield
    finally:
        for n, fn in saved.items():
            setattr(ops, n, fn)
        model.layers = layers


def step_counts(engine: Engine, model, weights: Dict[int, object]) -> Dict:
    """The profiler's counts of one ``engine.step()`` of ``model`` (profiler enabled):
    commits by cause, waits, dispatches (total and per layer), allocations, the weight
    bytes its op calls read (``weights``: ``weight_bytes.weight_tensors``), per op and per
    kernel rows."""
    recorder = _Recorder(weights)
    providers.reset_stats()
    profiler.reset()
    with _instrumented(model, recorder):
        engine.step()
    totals = _totals()
    recorder.weight_bytes += sum(count() for count in recorder.deferred_bytes)
    per_op = {}
    for name, row in sorted(recorder.ops.items()):
        provider = providers.stats(name, "metal")["last_selected"]
        per_op[name] = dict(row, provider=provider, native=not provider.startswith("reference:"))
    in_ops = sum(r["waits"] for r in recorder.ops.values())
    layer_dispatches = sorted({layer["dispatches"] for layer in recorder.layers})
    return {
        **totals,
        "waits_outside_ops": totals["waits"] - in_ops,
        "dispatches_per_layer": layer_dispatches[0] if len(layer_dispatches) == 1 else layer_dispatches,
        "waits_per_layer": recorder.layers[0]["waits"] if recorder.layers else 0,
        "weight_bytes": recorder.weight_bytes,
        "ops": per_op,
        "kernels": {n: dict(r, weight_bytes=round(recorder.kernel_bytes.get(n, 0)))
                    for n, r in parallelism.kernel_rows(profiler.rows()).items()},
    }


def run(model, prompt_ids: Sequence[int], decode_steps: int = 3,
        file_weight_bytes: Optional[int] = None) -> Dict:
    """Measures, for ``model`` on the Metal device, one prefill step of ``prompt_ids``
    and ``decode_steps`` decode steps (the last is the warmed-up one the table shows).
    ``file_weight_bytes``: the tensor bytes of the model's file, which the weight
    bytes read per decode step are compared with (at most 1.05x)."""
    weights = weight_bytes.weight_tensors(model)
    cache = model.new_cache(blocks_for(len(prompt_ids) + decode_steps + 1))
    # Op by op (no decode plans), so that each op call and layer is seen from Python;
    # the replayed step runs the same calls (decode_pipeline measures it).
    engine = Engine(model, cache, max_batched_tokens=max(len(prompt_ids), 1), decode_plans=False)
    engine.add_request(list(prompt_ids), SamplingParams(), max_tokens=decode_steps + 1)
    was = profiler.enabled()
    profiler.enable(True)
    try:
        prefill = step_counts(engine, model, weights)
        decodes = [step_counts(engine, model, weights) for _ in range(decode_steps)]
    finally:
        profiler.enable(was)
        engine.close()
    cap = int(os.environ.get("METALRT_MAX_DISPATCHES") or DEFAULT_MAX_DISPATCHES)
    decode = decodes[-1]
    reference_ops = sorted(n for n, r in decode["ops"].items() if not r["native"])
    attention = attention_grid.measure(model.config["num_attention_heads"], model.num_kv_heads,
                                       model.head_dim, model.dtype, kv_dtype=model.kv_type[0])
    kv_per_position = cache.nbytes // (cache.num_blocks * BLOCK_SIZE)   # all layers' K and V
    waiting_ops = {n: r["waits"] for n, r in decode["ops"].items() if r["waits"]}
    argmax_loads = parallelism.argmax_loads_per_thread(decode["kernels"], 1, model.vocab_size)
    return {
        "device": metalrt.device_info("metal")["name"],
        "prompt_tokens": len(prompt_ids),
        "num_layers": model.num_layers,
        "max_dispatches_per_command_buffer": cap,
        "prefill": prefill,
        "decode": decode,
        "decode_warmup": decodes[:-1],
        "replayed_decode": decode_pipeline.measure(model, prompt_ids),
        "kv_type": list(model.kv_type),
        "kv_bytes_per_position_per_layer": kv_per_position // model.num_layers,
        "device_bytes_per_step_at_4096": decode["weight_bytes"] + 4096 * kv_per_position,
        "metal_estimate": decode_estimate.metalrt_estimate(
            decode["kernels"], attention, model.num_layers, kv_per_position, model.vocab_size),
        "model_estimates": decode_estimate.model_estimates(decode["kernels"], attention, model.kv_type),
        "weight_bytes_resident": weight_bytes.resident_bytes(weights),
        "decode_attention": attention,
        "argmax_loads_per_thread": argmax_loads,
        "max_simd_collectives": {step: max(parallelism.step_collectives(s["kernels"]).values())
                                 for step, s in (("prefill", prefill), ("decode", decode))},
        "file_weight_bytes": file_weight_bytes,
        "goal": {
            "decode_weight_bytes_within_1_05x_file": None if file_weight_bytes is None else
            decode["weight_bytes"] <= 1.05 * file_weight_bytes,
            "one_wait_per_decode_step": decode["waits"] == 1,
            # The cap commits one command buffer per `cap` dispatches encoded.
            "decode_commits_from_cap": decode["dispatches"] // cap,
            "commits_at_cap_but_one_synchronize": (
                decode["commits_at_synchronize"] == 1 and decode["commits_at_flush"] == 0
                and decode["commits"] == decode["commits_at_cap"] + 1),
            "zero_bytes_after_warmup": decode["allocated_bytes"] == 0,
            "dispatches_per_layer_at_most_8": decode["dispatches_per_layer"] <= 8
            if isinstance(decode["dispatches_per_layer"], int) else False,
            "decode_attention_16_threadgroups_per_kv_head_at_4096": all(
                r["threadgroups_per_kv_head"] >= 16 for r in attention if r["context"] >= 4096),
            "decode_attention_parallel": all(
                r["positions_per_simdgroup"] <= parallelism.GOALS["positions_per_simdgroup"]
                and r["collectives_per_simdgroup"] <= parallelism.GOALS["collectives_per_simdgroup"]
                and (r["context"] < 512 or r["simdgroups"] >= parallelism.GOALS["simdgroups_at_512"])
                for r in attention),
            "argmax_loads_per_thread_at_most_32": argmax_loads <= parallelism.GOALS["argmax_loads_per_thread"],
            "reference_tier_ops": reference_ops,
            "ops_that_wait": waiting_ops,
        },
    }


def main(argv: List[str]) -> int:
    with open(argv[0]) as f:
        spec = json.load(f)
    model, _ = metalrt.load(spec["gguf"], device="metal")
    file_bytes = sum(info.nbytes for info in GGUFFile(spec["gguf"]).tensors.values())
    emit(run(model, spec["prompt"], decode_steps=spec["decode_steps"],
             file_weight_bytes=file_bytes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
