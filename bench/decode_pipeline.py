"""The replayed decode step's host figures, on the Metal device: calls from Python into
the extension per step (``bench/native_calls.py`` counts real calls), host waits,
commits by cause, device bytes newly allocated, and whether the profiler's event log
shows each step's successor committed before the host read the step's ids
(``metalrt.runner.decode_plans``). Deterministic on the simulated device: they depend
on the model and the code, not on timing — except the host waits: a step the device
finished before the next step's flush is read without one. Timed, not counted: the
host seconds of a replay (``replay_host_seconds``: encoding and committing the step,
not running it), a time of this machine's CPU, beside the simulated device's workers.
"""
from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from typing import Dict, Iterator, List, Sequence, Tuple

import metalrt
from metalrt import plan as plan_module, profiler
from metalrt.cache import blocks_for
from metalrt.runner import Engine, SamplingParams

from . import native_calls

WARMUP_STEPS = 3   # after the prefill: the recordings of both phases, then a replay
CALL_GOAL = 5      # the goal for Python-to-C++ calls per decode step
TIMED_REPLAYS = 5   # replays timed by replay_host_seconds


def committed_before_each_read(events: List[Tuple[str, str]]) -> bool:
    """True when, between consecutive host reads of Metal memory, a replay starts and
    commits before the read: step n + 1 was on the device before the host read step n's
    ids (the profiler logs a read whether or not it waited)."""
    start, reads = 0, 0
    for i, (kind, _) in enumerate(events):
        if kind != "read":
            continue
        between = events[start:i]
        if ("mark", "replay") not in between:
            return False
        replay = between.index(("mark", "replay"))
        if not any(k == "commit" for k, _ in between[replay:]):
            return False
        start, reads = i + 1, reads + 1
    return reads > 0


def measure(model, prompt_ids: Sequence[int], steps: int = 3) -> Dict:
    """Figures of ``steps`` greedy decode steps of ``model`` after the prefill and
    WARMUP_STEPS warm-up steps, each step measured alone (the worst step reported)."""
    cache = model.new_cache(blocks_for(len(prompt_ids) + WARMUP_STEPS + steps + 2))
    engine = Engine(model, cache, max_batched_tokens=max(len(prompt_ids), 1))
    engine.add_request(list(prompt_ids), SamplingParams(), max_tokens=WARMUP_STEPS + steps + 2)
    was = profiler.enabled()
    profiler.enable(True)
    per_step = []
    try:
        for _ in range(1 + WARMUP_STEPS):
            engine.step()
        for _ in range(steps):
            profiler.reset()
            with native_calls.counting() as counter:
                engine.step()
            total = next(r for r in profiler.rows() if r["name"] == "total")
            per_step.append({"native_calls": counter.calls, "calls_by_name": dict(counter.names),
                             "waits": total["waits"], "commits": total["commits"],
                             "commits_at_cap": total["commits_at_cap"],
                             "commits_at_flush": total["commits_at_flush"],
                             "commits_at_synchronize": total["commits_at_synchronize"],
                             "dispatches": total["dispatches"],
                             "allocated_bytes": total["allocated_bytes"],
                             "next_step_committed_before_read":
                                 committed_before_each_read(profiler.events())})
        stats = engine.stats
    finally:
        profiler.enable(was)
        engine.close()
    worst = max(per_step, key=lambda s: (s["native_calls"], s["waits"], s["allocated_bytes"]))
    return {
        "replay_host_seconds": replay_host_seconds(model, prompt_ids),
        "steps": per_step,
        "worst": worst,
        "plan_records": stats.plan_records,
        "plan_replays": stats.plan_replays,
        "pipelined_steps": stats.pipelined_steps,
        "goal": {
            "native_calls_per_step_at_most_5": all(s["native_calls"] <= CALL_GOAL for s in per_step),
            "one_wait_per_step": all(s["waits"] == 1 for s in per_step),
            "next_step_committed_before_read": all(s["next_step_committed_before_read"]
                                                    for s in per_step),
            "zero_bytes_after_warmup": all(s["allocated_bytes"] == 0 for s in per_step),
        },
    }


@contextmanager
def steady_replays(model, prompt_ids: Sequence[int], steps: int, warmup: int, replay) -> Iterator[Engine]:
    """A greedy engine of ``model`` past the prefill of ``prompt_ids`` and ``warmup``
    decode steps, with room for ``steps`` more, while ``metalrt.plan.Plan.replay`` is
    ``replay`` and the profiler is off; closed, and both restored, at the end."""
    cache = model.new_cache(blocks_for(len(prompt_ids) + warmup + steps + 3))
    engine = Engine(model, cache, max_batched_tokens=max(len(prompt_ids), 1))
    engine.add_request(list(prompt_ids), SamplingParams(), max_tokens=warmup + steps + 3)
    was, original = profiler.enabled(), plan_module.Plan.replay
    profiler.enable(False)
    plan_module.Plan.replay = replay
    try:
        for _ in range(1 + warmup):
            engine.step()
        yield engine
    finally:
        plan_module.Plan.replay = original
        profiler.enable(was)
        engine.close()


def replay_host_seconds(model, prompt_ids: Sequence[int], replays: int = TIMED_REPLAYS) -> Dict:
    """Host seconds of ``replays`` steady replays (``Plan.replay``) of greedy decode
    steps of ``model`` after the prefill and WARMUP_STEPS warm-up steps, the profiler
    off, each started with the device idle (the previous steps synchronized): the
    median and the least, and the count."""
    seconds: List[float] = []
    original = plan_module.Plan.replay

    def timed(self):
        start = time.perf_counter()
        try:
            original(self)
        finally:
            seconds.append(time.perf_counter() - start)

    with steady_replays(model, prompt_ids, replays, WARMUP_STEPS, timed) as engine:
        seconds.clear()
        while len(seconds) < replays and engine.has_work:
            metalrt.synchronize(model.device)
            engine.step()
    timed_ones = seconds[:replays]
    return {"replays": len(timed_ones), "median_s": statistics.median(timed_ones), "min_s": min(timed_ones)}
