"""Sampling filters against brute-force references, the filter order, seeds."""
import math

import re

import numpy as np
import pytest

from metalrt.runner.sampling import (Sampler, SamplingParams, apply_repetition_penalty,
                                     log_softmax, min_p_mask, top_k_mask, top_p_mask)


def logprobs_of(values):
    v = np.asarray(values, dtype=np.float64)
    return (v - math.log(np.exp(v).sum())).astype(np.float32)


def ref_top_k(lp, k):
    # Brute force: a token survives when fewer than k tokens are strictly better.
    return (lp[None, :] > lp[:, None]).sum(axis=1) < k


def ref_top_p(lp, p):
    # Walk tokens from most to least probable, keep while the mass so far is < p.
    order = sorted(range(len(lp)), key=lambda i: (-float(lp[i]), i))
    keep, mass = np.zeros(len(lp), bool), 0.0
    for i in order:
        if mass >= p:
            break
        keep[i] = True
        mass += math.exp(float(lp[i]))
    return keep


@pytest.mark.parametrize("vocab", [1, 7, 31, 32, 33, 1000])
@pytest.mark.parametrize("k", [1, 2, 5, 40])
def test_top_k_mask(vocab, k):
    lp = logprobs_of(np.random.default_rng(vocab * 100 + k).normal(size=vocab) * 3)
    expected = ref_top_k(lp, k) if k < vocab else np.ones(vocab, bool)
    assert np.array_equal(top_k_mask(lp, k), expected)
    assert top_k_mask(lp, k).sum() == min(k, vocab)
    assert top_k_mask(lp, 0).all()


def test_top_k_keeps_ties():
    lp = logprobs_of([1.0, 3.0, 2.0, 3.0, 2.0])
    assert top_k_mask(lp, 2).tolist() == [False, True, False, True, False]
    assert top_k_mask(lp, 3).tolist() == [False, True, True, True, True]


@pytest.mark.parametrize("vocab", [1, 31, 33, 500])
@pytest.mark.parametrize("p", [0.05, 0.5, 0.9, 0.999])
def test_top_p_mask(vocab, p):
    lp = logprobs_of(np.random.default_rng(vocab).normal(size=vocab) * 2)
    got = top_p_mask(lp, p)
    assert np.array_equal(got, ref_top_p(lp, p))
    assert got[np.argmax(lp)]
    # The kept set is the smallest top set whose mass reaches p.
    kept_mass = np.exp(lp[got].astype(np.float64)).sum()
    assert kept_mass >= p - 1e-6 or got.all()
    assert top_p_mask(lp, 1.0).all()


def test_top_p_known_distribution():
    lp = np.log(np.array([0.1, 0.5, 0.15, 0.25], dtype=np.float32))
    assert top_p_mask(lp, 0.45).tolist() == [False, True, False, False]
    assert top_p_mask(lp, 0.6).tolist() == [False, True, False, True]
    assert top_p_mask(lp, 0.85).tolist() == [False, True, True, True]
    assert top_p_mask(lp, 0.95).tolist() == [True, True, True, True]


@pytest.mark.parametrize("min_p", [0.0, 0.05, 0.3, 1.0])
def test_min_p_mask(min_p):
    lp = logprobs_of(np.random.default_rng(3).normal(size=257) * 2)
    probs = np.exp(lp.astype(np.float64))
    expected = probs >= min_p * probs.max() * (1 - 1e-6) if min_p > 0 else np.ones(257, bool)
    assert np.array_equal(min_p_mask(lp, min_p), expected)


def test_repetition_penalty_matches_ctrl_rule():
    logits = np.array([2.0, -2.0, 0.5, -0.5, 3.0], dtype=np.float32)
    out = apply_repetition_penalty(logits, [0, 1, 1, 3], 2.0)
    assert out.tolist() == [1.0, -4.0, 0.5, -1.0, 3.0]
    assert logits.tolist() == [2.0, -2.0, 0.5, -0.5, 3.0]   # input untouched


def test_sampler_penalty_window_is_last_context_tokens():
    logits = np.array([5.0, 4.9, 0.0], dtype=np.float32)
    # Token 0 is outside the 2-token window: not penalised, still the argmax.
    s = Sampler(SamplingParams(repetition_penalty=10.0, repetition_context_size=2))
    assert s.sample(logits, [0, 2, 2])[0] == 0
    assert s.sample(logits, [2, 0, 2])[0] == 1


def test_greedy_is_argmax_lowest_index_and_logprobs_only_when_asked():
    logits = np.array([0.0, 7.0, 7.0, -1.0], dtype=np.float32)
    token, lp = Sampler(SamplingParams()).sample(logits, [])
    assert token == 1 and lp is None
    token, lp = Sampler(SamplingParams(logprobs=True)).sample(logits, [])
    ref = logits.astype(np.float64) - math.log(np.exp(logits.astype(np.float64)).sum())
    assert token == 1 and np.allclose(lp, ref, atol=1e-6)


def test_logits_processors_run_first_in_order_on_a_copy_with_the_output():
    logits = np.array([0.0, 7.0, 6.0, -1.0], dtype=np.float32)
    seen = []

    def ban_one(output, x):
        seen.append(list(output))
        x[1] = -np.inf
        return x

    def plus_ten_on_three(output, x):
        assert x[1] == -np.inf   # after ban_one
        x[3] += 10.0
        return x

    params = SamplingParams(logprobs=True, logits_processors=(ban_one, plus_ten_on_three))
    assert params.needs_logits
    token, lp = Sampler(params).sample(logits, [9, 4, 2], [4, 2])
    assert token == 3 and seen == [[4, 2]] and logits[1] == 7.0   # the caller's row is kept
    expected = np.array([0.0, -np.inf, 6.0, 9.0])
    finite = np.isfinite(expected)
    ref = expected[finite] - math.log(np.exp(expected[finite]).sum())
    assert np.allclose(lp[finite], ref, atol=1e-6) and lp[1] == -np.inf


def test_log_softmax_large_values():
    lp = log_softmax(np.array([1000.0, 1000.0], dtype=np.float32))
    assert np.allclose(lp, [math.log(0.5)] * 2)


def test_seed_reproducible_and_seeds_differ():
    logits = np.random.default_rng(0).normal(size=200).astype(np.float32)

    def draw(seed):
        s = Sampler(SamplingParams(temp=1.0, seed=seed))
        return [s.sample(logits, [])[0] for _ in range(50)]

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)


def test_samples_follow_tempered_distribution_within_filters():
    logits = np.log(np.array([0.4, 0.3, 0.2, 0.1], dtype=np.float32))
    s = Sampler(SamplingParams(temp=0.5, top_k=3, seed=1))
    counts = np.bincount([s.sample(logits, [])[0] for _ in range(8000)], minlength=4)
    # top-k drops token 3; temperature 0.5 squares the remaining probabilities.
    p = np.array([0.4, 0.3, 0.2]) ** 2
    p /= p.sum()
    assert counts[3] == 0
    assert np.allclose(counts[:3] / counts.sum(), p, atol=0.02)


def test_filters_see_untempered_probabilities():
    # mlx-lm order: min-p on the untempered distribution. Token 1 has 0.25 of the top
    # probability: kept by min_p=0.2, although after temperature 0.5 it has only
    # 1/16 of the top probability (vLLM's order would drop it).
    logits = np.log(np.array([0.8, 0.2], dtype=np.float32))
    s = Sampler(SamplingParams(temp=0.5, min_p=0.2, seed=0))
    counts = np.bincount([s.sample(logits, [])[0] for _ in range(3000)], minlength=2)
    assert abs(counts[1] / 3000 - 1 / 17) < 0.015
    s = Sampler(SamplingParams(temp=0.5, min_p=0.3, seed=0))
    assert set(s.sample(logits, [])[0] for _ in range(500)) == {0}


@pytest.mark.parametrize("kwargs", [dict(temp=-1), dict(top_p=0), dict(top_p=1.5), dict(top_k=-1),
                                    dict(min_p=2), dict(repetition_penalty=0),
                                    dict(repetition_penalty=float("inf")), dict(seed=-1),
                                    dict(temp=float("nan"))])
def test_bad_params_raise(kwargs):
    with pytest.raises(ValueError, match=r"^\[sampling\]"):
        SamplingParams(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(temp="0.5"), "temp must be a number, got str"),
    (dict(top_k=2.5), "top_k must be an int, got float"),
    (dict(repetition_context_size=2.5), "repetition_context_size must be an int, got float"),
    (dict(top_p=True), "top_p must be a number, got bool"),
    (dict(seed="a"), "seed must be an int or None, got str"),
    (dict(logits_processors=(1,)), "logits_processors must be callables"),
])
def test_params_of_the_wrong_type_raise_type_error(kwargs, message):
    with pytest.raises(TypeError, match=r"^\[sampling\] " + re.escape(message)):
        SamplingParams(**kwargs)


def test_numpy_scalars_are_accepted_as_params():
    p = SamplingParams(temp=np.float32(0.5), top_k=np.int64(3), seed=np.int64(7))
    assert p.top_k == 3 and p.seed == 7
