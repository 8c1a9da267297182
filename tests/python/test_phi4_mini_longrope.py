"""Phi-4-mini's LongRoPE (``phi3`` with ``rope_type: longrope``, partial rotary 0.75,
factor 32, tied embeddings) against transformers fp32 on the CPU and the (simulated)
Metal device. The tiny twin's original context is 64 positions, so a 40-token prompt
runs on the short factors and a 150-token one on the long (transformers picks the set
by the call's largest position + 1 > original_max_position_embeddings). Bars as
test_models.py: max |Δlogit| <= 1e-3 x the logit range, equal greedy ids, no op on the
reference tier on Metal."""
import functools

import numpy as np
import pytest

import metalrt

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


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("length, factors", [(40, "short"), (150, "long")])
def test_logits_match_transformers(twin, length, factors, device):
    model, _ = twin(device)
    reference = twin()[0]
    ids = tiny_hf.prompt(length, length)
    with torch.no_grad():
        expected = reference(torch.tensor([ids])).logits[0].double().numpy()
    assert factor_set(reference) == factors
    metalrt.providers.reset_stats()
    got = model.logits(ids)
    assert reference_tier_ops(device) == []
    assert got.dtype == np.float32 and got.shape == (length, tiny_hf.VOCAB)
    span = expected.max() - expected.min()
    assert span > 0.5
    assert np.abs(got - expected).max() <= 1e-3 * span


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_tokens_match_transformers(twin, device):
    model, tokenizer = twin(device)
    ids = tiny_hf.prompt(40, 1)
    with torch.no_grad():
        expected = twin()[0].generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False,
                                      pad_token_id=0)[0, len(ids):].tolist()
    metalrt.providers.reset_stats()
    got = [r.token for r in metalrt.stream_generate(model, tokenizer, ids, max_tokens=16,
                                                    max_batched_tokens=8)]
    assert reference_tier_ops(device) == []
    assert got == expected
