"""Decode plans of hybrid models (tiny Qwen3-Next and Qwen3.5 of ``tiny_hybrid``, CPU
and Metal): the requests' recurrent-state slots are a fixed step input of the plan,
written per step like the block tables, so a replayed step reads and updates the
state at its requests' slots. Replay equals the unrecorded step bit for bit, logits and
state pools, over 14 steps across a KV block boundary with two requests at slots that
are not 0 and 1; the engine replays hybrid decode steps and still gives each request
what it gets alone, after an abort freed a slot. The step's counts are gated with the
dense model's in test_decode_pipeline.py."""
import numpy as np
import pytest

import metalrt
import tiny_hybrid
from conftest import DEVICES
from metalrt.cache import RecurrentLayer, ScheduledChunk, blocks_for, build_step
from metalrt.runner import Engine, SamplingParams
from metalrt.runner.decode_plans import DecodePlans

ARCHS = ["qwen3_next", "qwen3_5"]


@pytest.fixture(scope="module", params=[(a, d) for a in ARCHS for d in DEVICES],
                ids=lambda p: f"{p[0]}-{p[1]}")
def model(request):
    arch, device = request.param
    return metalrt.load(str(tiny_hybrid.path(arch)), device=device)[0]


def _states(cache):
    return [t.numpy() for layer in cache.layers if isinstance(layer, RecurrentLayer)
            for t in (layer.conv, layer.recurrent)]


def test_replayed_decode_equals_the_unrecorded_step_at_free_state_slots(model):
    """Requests of 4 and 9 prompt tokens at state slots 3 and 1 of 4; their 14 decode
    steps cross the first KV block boundary (position 16)."""
    prompts, slots, steps = [tiny_hybrid.prompt(4, 1), tiny_hybrid.prompt(9, 2)], [3, 1], 14
    sizes = [blocks_for(len(p) + steps) for p in prompts]
    blocks = [list(range(sum(sizes[:b]), sum(sizes[:b + 1]))) for b in range(len(prompts))]
    plain, planned = (model.new_cache(sum(sizes), num_slots=4) for _ in range(2))

    def chunks(tokens, starts):
        return [ScheduledChunk(t, s, table, state_slot=slot)
                for t, s, table, slot in zip(tokens, starts, blocks, slots)]

    prefill = build_step(chunks(prompts, [0, 0]), model.device)
    first = model.forward(prefill, plain).numpy()
    assert model.forward(prefill, planned).numpy().tobytes() == first.tobytes()
    tokens = np.argmax(first, axis=1).tolist()
    plans = DecodePlans(model, planned)
    for n in range(steps):
        positions = [len(p) + n for p in prompts]
        step = build_step(chunks([[t] for t in tokens], positions), model.device)
        reference = model.forward(step, plain).numpy()
        run = plans.launch(blocks, positions, tokens, state_slots=slots)
        replayed = plans.read_logits(run)
        assert not np.isnan(replayed).any()
        assert replayed.tobytes() == reference.tobytes(), f"step {n} at positions {positions}"
        tokens = np.argmax(reference, axis=1).tolist()
        assert plans.read_ids(run).tolist() == tokens
        for got, want in zip(_states(planned), _states(plain)):
            assert got.tobytes() == want.tobytes(), f"state after step {n}"
    assert plans.records == 2 and plans.replays == steps - 2
    # Slots 0 and 2 were never a request's: still zero in both caches.
    for pool in _states(planned):
        assert not pool[[0, 2]].any() and pool[[1, 3]].any()
    plans.release()


def _outputs(model, prompts, decode_plans, max_tokens=8):
    """Outputs of ``prompts`` run together after a first request, admitted with them,
    is aborted once prefilled (its slot 0 is freed: the others decode at slots 1, 2)."""
    engine = Engine(model, model.new_cache(64, num_slots=4), decode_plans=decode_plans)
    try:
        aborted = engine.add_request(tiny_hybrid.prompt(6, 9), SamplingParams(), max_tokens)
        requests = [engine.add_request(p, SamplingParams(), max_tokens) for p in prompts]
        engine.step()
        assert [r.state_slot for r in [aborted] + requests] == [0, 1, 2]
        engine.abort(aborted)
        while engine.has_work:
            engine.step()
        return [r.output for r in requests], engine.stats
    finally:
        engine.close()


def test_engine_replays_hybrid_decode_steps_with_the_op_by_op_tokens(model):
    prompts = [tiny_hybrid.prompt(5, 3), tiny_hybrid.prompt(11, 4)]
    want, plain = _outputs(model, prompts, decode_plans=False)
    got, stats = _outputs(model, prompts, decode_plans=True)
    assert got == want and all(len(o) == 8 for o in got)
    assert plain.plan_replays == 0
    # 7 decode steps of B = 2: both phases recorded, the rest replayed and pipelined.
    assert (stats.plan_records, stats.plan_replays) == (2, 5)
    assert stats.pipelined_steps >= 5
