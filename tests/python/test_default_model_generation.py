"""The default model (SmolLM2-135M-Instruct, Q4_1 GGUF) on the CPU and the Metal device
(the simulated one without an Apple GPU) against the model's reference values in float32
after dequantization: the prompt's token ids, its greedy continuation and the top token
" Paris" after "The capital of France is"."""
import numpy as np
import pytest

import metalrt


@pytest.fixture(scope="module", params=["cpu", "metal"])
def smollm2(request):
    model, tokenizer = metalrt.load(device=request.param)
    assert model.device == request.param
    return model, tokenizer


def test_prompt_ids_and_greedy_continuation(smollm2):
    model, tokenizer = smollm2
    ids = tokenizer.encode("Once upon a time")
    assert ids == [6403, 1980, 253, 655]
    tokens = [r.token for r in metalrt.stream_generate(model, tokenizer, ids, max_tokens=10)]
    assert tokens == [28, 260, 2240, 282, 23324, 27108, 436, 253, 15114, 39228]


def test_top_token_after_capital_of_france(smollm2):
    model, tokenizer = smollm2
    logits = model.logits(tokenizer.encode("The capital of France is"))
    assert logits.shape[1] == 49152 and np.isfinite(logits).all()
    assert int(np.argmax(logits[-1])) == 7042
    assert tokenizer.decode([7042]) == " Paris"
