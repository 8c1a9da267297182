"""Phi-4-mini's LongRoPE (``phi3`` with ``rope_type: longrope``, partial rotary 0.75,
factor 32, tied embeddings) against transformers fp32 on the CPU and the (simulated)
Metal device. The tiny twin's original context is 64 positions, so a 40-token prompt
runs on the short factors and a 150-token one on the long (transformers picks the set
by the call's largest position + 1 > original_max_position_embeddings); its logits and
greedy parity gates are test_models.py's (``phi4_mini``). Here: generation across the
switch (transformers recomputes the cache there, so does the engine), with decode
plans replayed on both sides, op by op, speculating and batched with prefix caching,
as the same greedy ids; no op on the reference tier on Metal."""
import functools
import json
from pathlib import Path

import numpy as np
import pytest

import metalrt
from metalrt.cache import BlockAllocator, ScheduledChunk, blocks_for, build_step
from metalrt.runner.decode_plans import DecodePlans
from metalrt.runner.engine import Engine
from metalrt.runner.request import Request
from metalrt.runner.sampling import SamplingParams
from metalrt.runner.scheduler import Scheduler
from metalrt.runner.speculative import SpeculativeConfig

import tiny_hf
import torch  # test dependency (the "test" extra)
from conftest import DEVICES
from test_models import reference_tier_ops

ARCH = "phi4_mini"
ORIGINAL = 64


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    """twin() -> (transformers model, directory); twin(device) -> metalrt's
    (model, tokenizer) of that directory, each made once."""
    @functools.lru_cache(maxsize=None)
    def get(device=None):
        if device is not None:
            return metalrt.load(get()[1], device=device)
        directory = tmp_path_factory.mktemp(ARCH)
        return tiny_hf.build(ARCH, directory), str(directory)
    return get


def factor_set(reference):
    """'long' or 'short': the set transformers' rotary embedding used in its last call."""
    rotary = reference.model.rotary_emb
    return "long" if torch.equal(rotary.inv_freq, rotary.long_inv_freq) else "short"


@pytest.mark.parametrize("length, factors", [(40, "short"), (150, "long")])
def test_the_parity_prompts_run_on_both_factor_sets(twin, length, factors):
    """test_models.py's parity prompts of 40 and 150 tokens (``phi4_mini`` there) run on
    the short and the long factors in transformers, and those give other logits."""
    reference = twin()[0]
    ids = torch.tensor([tiny_hf.prompt(length, length)])
    with torch.no_grad():
        logits = reference(ids).logits[0]
    assert factor_set(reference) == factors
    rotary = reference.model.rotary_emb
    other = rotary.original_inv_freq if factors == "long" else rotary.long_inv_freq
    with torch.no_grad(), _forced(rotary, other):
        changed = reference(ids).logits[0]
    assert (changed - logits).abs().max() > 0.1 * (logits.max() - logits.min())


class _forced:
    """Within it, transformers' rotary embedding keeps ``inv_freq`` (no factor switch)."""

    def __init__(self, rotary, inv_freq):
        self.rotary, self.inv_freq = rotary, inv_freq

    def __enter__(self):
        self.saved = self.rotary.forward
        inner = type(self.rotary).forward.__wrapped__   # forward without dynamic_rope_update

        def forward(x, position_ids):
            self.rotary.inv_freq.copy_(self.inv_freq)
            return inner(self.rotary, x, position_ids)
        self.rotary.forward = forward

    def __exit__(self, *exc):
        self.rotary.forward = self.saved


@pytest.mark.parametrize("device", DEVICES)
def test_decode_plans_replay_below_and_above_the_switch(twin, device):
    """Decode steps from position 40 to 87 cross the original context (64): the plan
    reads one table of both factor sets, its rows (position, + 64 on the long factors)
    written per step, so one key records once per phase and replays on both sides,
    every replayed step's logits equal to the op-by-op step's bit for bit (which picks
    the set by the step's position)."""
    model, _ = twin(device)
    prompt, steps = tiny_hf.prompt(40, 3), 48
    blocks = list(range(blocks_for(len(prompt) + steps)))
    plain_cache, plan_cache = model.new_cache(len(blocks)), model.new_cache(len(blocks))
    for cache in (plain_cache, plan_cache):
        model.forward(build_step([ScheduledChunk(prompt, 0, blocks)], device), cache)
    plans = DecodePlans(model, plan_cache)
    token, replays = int(prompt[-1]), []
    for n in range(steps):
        position = len(prompt) + n
        step = build_step([ScheduledChunk([token], position, blocks)], device)
        reference = model.forward(step, plain_cache).numpy()
        replayed_before = plans.replays
        run = plans.launch([blocks], [position], [token])
        replays.append((position, plans.replays - replayed_before))
        replayed = plans.read_logits(run)
        assert not np.isnan(replayed).any()
        assert replayed.tobytes() == reference.tobytes(), f"step {n} at position {position}"
        token = int(np.argmax(reference[0]))
    assert plans.records == 2 and plans.replays == steps - 2
    assert sum(r for p, r in replays if p < ORIGINAL) == ORIGINAL - len(prompt) - 2
    assert sum(r for p, r in replays if p >= ORIGINAL) == len(prompt) + steps - ORIGINAL
    plans.release()


def _engine_outputs(model, prompts, max_tokens, **engine_args):
    engine = Engine(model, model.new_cache(sum(blocks_for(len(p) + max_tokens) for p in prompts)),
                    **engine_args)
    requests = [engine.add_request(p, SamplingParams(), max_tokens) for p in prompts]
    while engine.has_work:
        engine.step()
    engine.close()
    return [r.output for r in requests], engine.stats


def _transformers_greedy(reference, ids, max_tokens):
    with torch.no_grad():
        return reference.generate(torch.tensor([ids]), max_new_tokens=max_tokens,
                                  do_sample=False, pad_token_id=0)[0, len(ids):].tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("decode_plans, speculative", [(True, None), (False, None),
                                                       (True, SpeculativeConfig("ngram", 4))],
                         ids=["plans", "op_by_op", "ngram"])
def test_greedy_tokens_across_the_switch_match_transformers(twin, device, decode_plans,
                                                           speculative):
    """40 new tokens after a 40-token prompt: transformers' Phi-3 generation drops its
    cache when the sequence passes 64 tokens and recomputes all of it on the long
    factors; the engine recomputes the request there too, with decode plans (replayed
    on both sides), op by op, and speculating (prompt lookup: no verify step crosses
    the switch)."""
    model, _ = twin(device)
    ids = tiny_hf.prompt(40, 1)
    expected = _transformers_greedy(twin()[0], ids, 40)
    assert len(set(expected[24:])) > 8   # no single repeated token past the switch
    metalrt.providers.reset_stats()
    (got,), stats = _engine_outputs(model, [ids], 40, decode_plans=decode_plans,
                                    speculative=speculative)
    assert reference_tier_ops(device) == []
    assert got == expected
    assert stats.long_rope_recomputes == 1
    if speculative is not None:
        assert stats.verify_steps > 0
        return
    # 38 decode steps (24 before the recompute, 14 after), one key, recorded once per
    # phase.
    assert (stats.plan_records, stats.plan_replays) == ((2, 36) if decode_plans else (0, 0))


@pytest.mark.parametrize("device", DEVICES)
def test_a_batch_of_short_and_long_requests_matches_transformers(twin, device):
    """One engine, prefix caching on: a 150-token prompt (prefilled in chunks of 32, every
    one on the long factors), a 40-token one that passes the switch and is recomputed,
    and the same 40-token prompt again (its short-factor blocks are not reused for the
    long recompute, nor the long ones for its prefill), each request's tokens as
    transformers generates them alone."""
    model, _ = twin(device)
    short, long = tiny_hf.prompt(40, 1), tiny_hf.prompt(150, 4)
    prompts = [long, short, short]
    expected = [_transformers_greedy(twin()[0], p, 32) for p in prompts[:2]]
    got, stats = _engine_outputs(model, prompts, 32, prefix_caching=True, max_batched_tokens=32)
    assert got == expected + expected[1:]
    assert stats.long_rope_recomputes == 2
    assert stats.prompt_tokens_cached >= 32   # the repeated prompt's first two blocks


@pytest.mark.parametrize("device", DEVICES)
def test_a_windowed_long_rope_model_recomputes_with_its_window_pool(twin, device, tmp_path):
    """The twin with a window of 24 positions on every layer: its cache keeps a window
    pool, whose blocks the recompute at the switch releases and takes again; the
    tokens are transformers' (windowed mask, recomputed cache)."""
    import transformers as tf

    directory = tmp_path / "windowed"
    directory.mkdir()
    source = Path(twin()[1])
    for f in source.iterdir():
        (directory / f.name).symlink_to(f)
    config = json.loads((source / "config.json").read_text())
    (directory / "config.json").unlink()
    (directory / "config.json").write_text(json.dumps(dict(config, sliding_window=24)))
    reference = tf.AutoModelForCausalLM.from_pretrained(directory, dtype="float32").eval()
    model, _ = metalrt.load(str(directory), device=device)
    ids = tiny_hf.prompt(40, 1)
    expected = _transformers_greedy(reference, ids, 40)
    assert expected != _transformers_greedy(twin()[0], ids, 40)   # the window bites
    engine = Engine(model, model.new_cache(blocks_for(80)))
    assert engine.cache.window == 24
    request = engine.add_request(ids, SamplingParams(), 40)
    while engine.has_work:
        engine.step()
    engine.close()
    assert request.output == expected and engine.stats.long_rope_recomputes == 1


def test_drafts_and_pipelined_steps_stop_before_the_switch():
    """A short request of 61 tokens may grow by 3 before the switch (64): a draft is cut
    to that, and a next decode that would make it 65 tokens is a recompute, not a
    decode; a request on the long factors has no limit."""
    scheduler = Scheduler(BlockAllocator(8), rope_switch=ORIGINAL)
    request = Request(0, list(range(ORIGINAL - 3)), SamplingParams(), 8, frozenset())
    assert scheduler.rope_room(request) == 3
    assert not scheduler.short_rope_past_switch(request, ORIGINAL)
    assert scheduler.short_rope_past_switch(request, ORIGINAL + 1)
    request.rope_offset = ORIGINAL
    assert scheduler.rope_room(request) is None
    assert not scheduler.short_rope_past_switch(request, ORIGINAL + 1)
    assert Scheduler(BlockAllocator(8)).rope_room(request) is None
