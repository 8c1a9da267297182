"""Issue #40's decode proxies at Llama-3.2-1B's per-layer shapes (hidden 2,048, 32 query /
8 kv heads of 64, FFN 8,192), measured by the bench's counters (bench/counters.py) on
the Metal device (the simulated one without an Apple GPU), gated like the default
model's (test_decode_dispatches.py). The model is a cut: 3 of the 16 layers and 16,384
of the 128,256 vocabulary entries (the two-level argmax still scans 4 chunks), a
bench/shapes_gguf.py Q4_K_M file with random weights written once per run (~140 MB,
~2 s). Its prompt is one token: a 4-token prefill through the K-quant GEMMs at these
shapes takes ~70 s on the simulated device, a decode step ~1 s. Proxies: decode
attention's SIMD-groups at 512 positions (>= 256), the positions one SIMD-group walks
(<= 16 at every context), the busiest SIMD-group's collectives (<= 64), the argmax's
serial loads a thread (<= 32), and the dispatches of a step: 8 a layer where q, k and v
share a format, 12 where llama.cpp's Q4_K_M mix gives attn_v Q6_K (layers 0 and 1 of
16 here: the three projections run apart, then RoPE and the cache write, instead of one
concatenated GEMV and qkv_rope_cache)."""
import dataclasses
import sys
from pathlib import Path

import pytest

import metalrt

import decode_proxy_gates

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository's bench/
from bench import counters, parallelism, shapes_gguf  # noqa: E402

pytestmark = pytest.mark.skipif(not metalrt.is_available("metal"), reason="needs a Metal device")

LAYERS, VOCAB = 3, 16384


@pytest.fixture(scope="module")
def decode(tmp_path_factory):
    shape = dataclasses.replace(shapes_gguf.shape_of("llama-3.2-1b", LAYERS), vocab=VOCAB)
    path = shapes_gguf.write(tmp_path_factory.mktemp("shape-1b") / "llama-3.2-1b-cut.gguf", shape, "q4_k_m")
    model, tokenizer = metalrt.load(str(path), device="metal")
    assert (model.num_layers, model.num_kv_heads, model.head_dim, model.vocab_size) == (LAYERS, 8, 64, VOCAB)
    return counters.run(model, tokenizer.encode("Once")[:1], decode_steps=2)


def test_1b_shape_decode_step_dispatches(decode):
    step = decode["decode"]
    assert step["dispatches_per_layer"] == [8, 12]
    # 12 + 12 + 8 + embedding, final norm, LM head and the two-level argmax's 2.
    assert step["dispatches"] == 12 + 12 + 8 + 5
    # The Q4_K/Q6_K bytes of the cut's tensors, once (test_decode_dispatches scales the
    # default model's step to this cut and gets the same).
    assert step["weight_bytes"] == 139_404_944
    assert decode["goal"]["reference_tier_ops"] == [] and step["allocated_bytes"] == 0


def test_1b_shape_decode_attention_is_a_short_chain_on_a_wide_grid(decode):
    rows = decode_proxy_gates.check_attention(decode)
    assert rows[512]["simdgroups"] == 32 * 32   # 32 query heads x 32 SIMD-groups


def test_1b_shape_argmax_and_kv_bytes(decode):
    kernels = decode["decode"]["kernels"]
    assert decode["argmax_loads_per_thread"] == parallelism.argmax_loads_per_thread(kernels, 1, VOCAB)
    assert decode["argmax_loads_per_thread"] <= parallelism.GOALS["argmax_loads_per_thread"]
    # float16 K and V of 8 kv heads x 64 (f32: 4,096 bytes a position and layer).
    assert decode["kv_bytes_per_position_per_layer"] == 2 * 8 * 64 * 2
