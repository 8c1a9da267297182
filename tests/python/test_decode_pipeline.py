"""Decode steps of the default model replayed from plans, with the greedy ids kept on the
device (metalrt.runner.decode_plans, Engine): bit-exact against the unrecorded step, the
same tokens as the model's references, few calls into C++, one host wait per step with
the next step committed before it, no allocation after warm-up, a stale key never
replayed. On the CPU and the Metal device (the simulated one without an Apple GPU); the
steady step's counts also for the tiny hybrids (their plans: test_hybrid_decode_plans.py)."""
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

import metalrt
import tiny_hybrid
from metalrt.cache import ScheduledChunk, blocks_for, build_step
from metalrt.plan import read_output
from metalrt.runner.decode_plans import DecodePlans, DecodeRun, decode_key
from metalrt.runner.engine import Engine
from metalrt.runner.sampling import SamplingParams
from conftest import requires_metal

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository's bench/
from bench import native_calls  # noqa: E402

PROMPT = [6403, 1980, 253, 655]   # "Once upon a time"
# Its greedy continuation (the model's reference, tests/python/test_default_model_generation.py).
CONTINUATION = [28, 260, 2240, 282, 23324, 27108, 436, 253, 15114, 39228]


@pytest.fixture(scope="module", params=["cpu", "metal"])
def model(request):
    if not metalrt.is_available(request.param):
        pytest.skip("no Metal device")
    model, _ = metalrt.load(device=request.param)
    return model


def _prefill(model, cache, prompt, blocks):
    step = build_step([ScheduledChunk(prompt, 0, blocks)], model.device)
    return int(np.argmax(model.forward(step, cache).numpy()[-1]))


def test_replayed_decode_equals_the_unrecorded_step_across_a_block_boundary(model):
    """14 decode steps from position 4 cross the first block boundary (position 16); the
    plan's logits equal the unrecorded step's bit for bit at every one."""
    prompt, steps = PROMPT, 14
    blocks = list(range(blocks_for(len(prompt) + steps)))
    plain_cache, plan_cache = model.new_cache(len(blocks)), model.new_cache(len(blocks))
    token = _prefill(model, plain_cache, prompt, blocks)
    assert _prefill(model, plan_cache, prompt, blocks) == token == CONTINUATION[0]
    plans = DecodePlans(model, plan_cache)
    for n in range(steps):
        position = len(prompt) + n
        step = build_step([ScheduledChunk([token], position, blocks)], model.device)
        reference = model.forward(step, plain_cache).numpy()
        run = plans.launch([blocks], [position], [token])
        replayed = plans.read_logits(run)
        assert not np.isnan(replayed).any()
        assert replayed.tobytes() == reference.tobytes(), f"step {n} at position {position}"
        token = int(np.argmax(reference[0]))
        assert int(plans.read_ids(run)[0]) == token
    # Recorded once per phase, replayed after.
    assert plans.records == 2 and plans.replays == steps - 2
    plans.release()


def _engine(model, prompts_and_budgets, eos=()):
    blocks = sum(blocks_for(len(p) + b) for p, b in prompts_and_budgets)
    engine = Engine(model, model.new_cache(blocks))
    requests = [engine.add_request(p, SamplingParams(), b, eos) for p, b in prompts_and_budgets]
    return engine, requests


def _run(engine):
    while engine.has_work:
        engine.step()


def test_greedy_reference_through_pipelined_plans(model):
    engine, (request,) = _engine(model, [(PROMPT, len(CONTINUATION))])
    _run(engine)
    assert request.output == CONTINUATION and request.finish_reason == "length"
    stats = engine.stats
    # Prefill, then 9 decode steps: 2 recordings (one per phase), the rest replayed;
    # every decode step but the last (max_tokens) committed ahead of the previous read.
    assert (stats.plan_records, stats.plan_replays) == (2, 7)
    assert stats.pipelined_steps == 8 and stats.discarded_tokens == 0
    engine.close()


def test_the_next_engine_over_the_cache_replays_its_plans(model):
    """The plans stay with the cache: a second engine over the same model and cache
    records nothing and gives the same tokens; another model's engine over it records
    its own (the old plans are released first)."""
    cache = model.new_cache(blocks_for(len(PROMPT) + len(CONTINUATION)))
    for records in (2, 0):
        engine = Engine(model, cache)
        request = engine.add_request(PROMPT, SamplingParams(), len(CONTINUATION))
        _run(engine)
        engine.close()
        assert request.output == CONTINUATION
        assert (engine.stats.plan_records, engine.stats.plan_replays) == (records, 9 - records)
    plans = cache.decode_plans
    recorded = [phase.plan for phases in plans._keys.values() for phase in phases if phase.plan]
    assert len(recorded) == 2 and all(plan.state == "ready" for plan in recorded)
    other, _ = metalrt.load(device=model.device)
    engine = Engine(other, cache)
    request = engine.add_request(PROMPT, SamplingParams(), len(CONTINUATION))
    _run(engine)
    engine.close()
    assert request.output == CONTINUATION and engine.stats.plan_records == 2
    assert cache.decode_plans is not plans and cache.decode_plans.model is other
    assert all(plan.state == "released" for plan in recorded)


def test_plans_recorded_before_a_provider_was_switched_off_are_recorded_again():
    """set_enabled changes what the next engine over a cache replays: the plans it
    finds were recorded with the provider switched off, so it records its own."""
    model, _ = metalrt.load(device="cpu")
    cache = model.new_cache(blocks_for(len(PROMPT) + len(CONTINUATION)))

    def generate():
        engine = Engine(model, cache)
        request = engine.add_request(PROMPT, SamplingParams(), len(CONTINUATION))
        _run(engine)
        engine.close()
        return request.output, engine.stats.plan_records

    assert generate() == (CONTINUATION, 2)
    version = metalrt.providers.version()
    metalrt.providers.set_enabled("cpu_fast_rms_norm", False)
    try:
        assert metalrt.providers.version() != version
        metalrt.providers.reset_stats()
        assert generate() == (CONTINUATION, 2)
        assert metalrt.providers.stats("rms_norm", "cpu")["last_selected"] == "cpu_rms_norm"
        assert generate() == (CONTINUATION, 0)   # unchanged since: replayed
    finally:
        metalrt.providers.set_enabled("cpu_fast_rms_norm", True)
    assert generate() == (CONTINUATION, 2)


def test_a_cache_with_plans_is_freed_with_its_last_reference():
    """The plans point back at their model and cache weakly: dropping an engine's
    model and cache frees them at once, without waiting for the cycle collector."""
    import gc
    import weakref
    model, _ = metalrt.load(device="cpu")
    cache = model.kv_cache(blocks_for(len(PROMPT) + 3))
    engine = Engine(model, cache)
    engine.add_request(PROMPT, SamplingParams(), 3)
    _run(engine)
    engine.close()
    assert cache.decode_plans is not None and cache.decode_plans.model is model
    gone = [weakref.ref(model), weakref.ref(cache)]
    gc.disable()
    try:
        del model, cache, engine
        assert [ref() for ref in gone] == [None, None]
    finally:
        gc.enable()


def test_a_token_after_eos_is_discarded_never_emitted():
    """Two greedy requests decode together; the first meets its eos at its 4th token,
    after the next step (holding its row) was already committed on the device's ids:
    that row's token is dropped, the other request goes on unchanged. (The engine's
    logic, the same on every device: run on the CPU only.)"""
    model, _ = metalrt.load(device="cpu")
    other = [1, 2, 3, 4, 5, 6, 7]
    engine, (alone,) = _engine(model, [(other, 6)])
    _run(engine)
    engine.close()
    blocks = blocks_for(len(PROMPT) + 10) + blocks_for(len(other) + 6)
    engine = Engine(model, model.new_cache(blocks))
    stopping = engine.add_request(PROMPT, SamplingParams(), 10, eos_ids=[CONTINUATION[3]])
    going = engine.add_request(other, SamplingParams(), 6)
    emitted = {stopping: [], going: []}
    while engine.has_work:
        for out in engine.step():
            emitted[out.request].append(out.token)
    assert stopping.output == emitted[stopping] == CONTINUATION[:4]
    assert stopping.finish_reason == "stop"
    assert going.output == emitted[going] == alone.output
    assert engine.stats.discarded_tokens == 1 and engine.stats.pipelined_steps >= 3
    engine.close()


def test_stale_key_is_recorded_again_and_tokens_match_single_runs(model):
    """Two requests decode together (B = 2) until the shorter one ends; the B = 1 steps
    after it are a new key, recorded, never a replay of the B = 2 plan."""
    other = [1, 2]
    engine, (alone,) = _engine(model, [(other, 2)])
    _run(engine)
    engine.close()
    engine, (first, second) = _engine(model, [(PROMPT, 4), (other, 2)])
    _run(engine)
    assert first.output == CONTINUATION[:4] and second.output == alone.output
    (pair_key, pair), (single_key, single) = engine.plans._keys.items()
    assert pair_key[0] == 2 and single_key[0] == 1
    # B = 2 ran once (the shorter request ends with it: nothing pipelined after it);
    # B = 1 recorded both phases for the last two tokens.
    assert [p.plan.replays for p in pair if p.plan] == [0]
    assert [p.plan.replays for p in single] == [0, 0]
    assert engine.stats.plan_records == 3 and engine.stats.plan_replays == 0
    engine.close()


def _steady_case(name):
    """(model on Metal, prompt, its 8 greedy tokens) of a steady-decode case: the default
    model and its reference, or a tiny hybrid (recurrent state at its request's slot)
    and its tokens run op by op."""
    if name == "default":
        return metalrt.load(device="metal")[0], PROMPT, CONTINUATION[:8]
    model = metalrt.load(str(tiny_hybrid.path(name)), device="metal")[0]
    prompt = tiny_hybrid.prompt(9, 3)
    engine = Engine(model, model.new_cache(blocks_for(len(prompt) + 8)), decode_plans=False)
    request = engine.add_request(prompt, SamplingParams(), 8)
    _run(engine)
    engine.close()
    return model, prompt, request.output


@contextmanager
def _profiling():
    was = metalrt.profiler.enabled()
    metalrt.profiler.enable(True)
    try:
        yield
    finally:
        metalrt.profiler.enable(was)
        metalrt.profiler.reset()


def _steady_engine(name):
    """(engine past its prefill, both phases' recordings and a replay, its request, the
    request's expected tokens) for a steady-decode case."""
    model, prompt, expected = _steady_case(name)
    engine, (request,) = _engine(model, [(prompt, 8)])
    for _ in range(4):
        engine.step()
    return engine, request, expected


def _profiled_steady_step(engine):
    """Runs one steady step (the previous call committed it) on fresh profile counters
    and checks what such a step shows whatever the device's timing: no allocation; one
    host read of Metal memory, of this step's ids, logged after the next step's replay
    and first commit, so the next step took those ids on the device, never from the
    host; at most one host wait, that read's; the token returned is the device's.
    Returns (calls into C++, host waits)."""
    assert engine._inflight is not None, "the previous step committed this one"
    pending, pipelined = engine._inflight[0], engine.stats.pipelined_steps
    metalrt.profiler.reset()
    with native_calls.counting() as counter:
        (out,) = engine.step()
    total = {r["name"]: r for r in metalrt.profiler.rows()}["total"]
    events = metalrt.profiler.events()
    assert total["allocated_bytes"] == 0, total
    assert ("mark", "replay") in events, events
    replay = events.index(("mark", "replay"))
    first_commit = next((i for i, e in enumerate(events) if e[0] == "commit" and i > replay), None)
    assert first_commit is not None, events
    reads = [i for i, e in enumerate(events) if e[0] == "read"]
    assert [events[i] for i in reads] == [("read", hex(pending.ids.data_ptr()))], events
    assert reads[0] > first_commit, events   # read once the next step is on the device
    step_waits = [i for i, e in enumerate(events) if e[0] == "wait"]
    assert total["waits"] == len(step_waits) <= 1, events
    assert all(w == reads[0] - 1 for w in step_waits), events   # the read's wait
    assert engine.stats.pipelined_steps == pipelined + 1
    assert engine._inflight is not None and engine._inflight[0] is not pending
    assert out.token == int(read_output(pending.ids)[0])
    return counter.calls, len(step_waits)


@requires_metal
@pytest.mark.parametrize("name", ["default", "qwen3_next", "qwen3_5"])
def test_metal_steady_decode_step_calls_waits_order_and_allocations(name):
    """Each steady step: at most 5 calls into C++ and what _profiled_steady_step checks.
    The order is asserted on the read of the ids, which the profiler logs whether or not
    it waited: a command buffer the device finished before the next step's flush is
    retired there (CommandStream::RetireCompletedLocked), so reading its ids may wait
    for nothing (the next test makes that happen)."""
    engine, request, expected = _steady_engine(name)
    steps = 3
    with _profiling():
        calls = [_profiled_steady_step(engine)[0] for _ in range(steps)]
    assert max(calls) <= 5, calls
    assert request.output == expected[:len(request.output)]
    assert engine.stats.plan_replays >= steps
    engine.close()


@requires_metal
def test_metal_steady_decode_step_when_the_device_finished_first():
    """A synchronize before each step finishes it on the device before the host reads
    its ids (as a slow host does): the read waits for nothing, and it still follows the
    next step's first commit."""
    engine, request, expected = _steady_engine("default")
    with _profiling():
        for _ in range(3):
            metalrt.synchronize("metal")
            assert _profiled_steady_step(engine)[1] == 0
    assert request.output == expected[:len(request.output)]
    engine.close()


def test_a_step_of_another_key_is_never_fed_ids_on_the_device():
    """Position 1024 starts a new position bucket (Rope's table grows there): the step
    after one at 1023 is another key, so it is launched from the host's ids, not
    pipelined on a plan of the old key."""
    table = [list(range(65))]
    run = DecodeRun(decode_key(1, 65, 1023), 0, None, None)
    assert run.key == (1, 128, 10)
    assert DecodePlans.can_follow(run, table, [1000])
    assert not DecodePlans.can_follow(run, table, [1024])
    assert not DecodePlans.can_follow(run, table + table, [1000, 1000])
    plans = DecodePlans(model=None, cache=None)
    with pytest.raises(ValueError, match="previous run of the same key"):
        plans.launch(table, [1024], None, after=run)
