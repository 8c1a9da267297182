"""The fused decode-layer ops through the Python API, on each device: each equals the
composition of the ops it fuses byte for byte (quantized_matmul_bt + add,
quantized_matmul_bt + silu_and_mul, qkv_split + rope + reshape_and_cache, one
quantized_matmul_bt per concatenated weight), the residual
form works in place, and bad arguments raise ValueError / TypeError naming the op."""
import numpy as np
import pytest

import metalrt
from metalrt import ops
from test_quantized import random_blocks

DEVICES = ["cpu"] + (["metal"] if metalrt.is_available("metal") else [])


def q4_1(n, k, device, seed=1):
    return metalrt.quantized_tensor("q4_1", (n, k), random_blocks("q4_1", n, k, seed), device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_add_and_swiglu_equal_their_compositions(device):
    rng = np.random.default_rng(3)
    x = metalrt.asarray(rng.uniform(-1, 1, (2, 576)).astype(np.float32), device=device)
    w = q4_1(64, 576, device)
    residual = rng.uniform(-1, 1, (2, 64)).astype(np.float32)
    expected = ops.add(ops.quantized_matmul_bt(x, w), metalrt.asarray(residual, device=device)).numpy()
    h = metalrt.asarray(residual, device=device)
    assert ops.quantized_matmul_bt_add(x, w, h, out=h) is not None
    assert np.array_equal(h.numpy(), expected) and not np.array_equal(h.numpy(), residual)
    swiglu = ops.quantized_matmul_bt_swiglu(x, w).numpy()
    assert swiglu.shape == (2, 32)
    assert np.array_equal(swiglu, ops.silu_and_mul(ops.quantized_matmul_bt(x, w)).numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_qkv_rope_cache_equals_split_rope_and_cache_write(device):
    rng = np.random.default_rng(4)
    heads, kv, dim, tokens = 9, 3, 64, 3
    qkv = metalrt.asarray(rng.uniform(-1, 1, (tokens, (heads + 2 * kv) * dim)).astype(np.float32),
                          device=device)
    cache0 = rng.uniform(-1, 1, (2, 16, kv, dim)).astype(np.float32)
    positions, slots = [4, 5, 6], [4, -1, 20]
    kc, vc = (metalrt.asarray(cache0, device=device) for _ in range(2))
    q, k, v = ops.qkv_split(qkv, heads * dim, kv * dim, kv * dim)
    q = ops.rope_interleaved(q.reshape(tokens, heads, dim), positions, dim, 1e5)
    k = ops.rope_interleaved(k.reshape(tokens, kv, dim), positions, dim, 1e5)
    ops.reshape_and_cache(k, v.reshape(tokens, kv, dim), kc, vc, slots)
    fkc, fvc = (metalrt.asarray(cache0, device=device) for _ in range(2))
    fq = ops.qkv_rope_cache(qkv, positions, fkc, fvc, slots, heads, dim, 1e5, neox=False)
    assert fq.shape == (tokens, heads, dim)
    assert np.array_equal(fq.numpy(), q.numpy())
    assert np.array_equal(fkc.numpy(), kc.numpy()) and np.array_equal(fvc.numpy(), vc.numpy())
    assert not np.array_equal(fkc.numpy(), cache0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m", [1, 9])
def test_matmul_concat_equals_one_matmul_per_weight(device, m):
    rng = np.random.default_rng(5)
    x = metalrt.asarray(rng.uniform(-1, 1, (m, 576)).astype(np.float32), device=device)
    weights = [q4_1(n, 576, device, seed) for n, seed in ((576, 6), (192, 7), (192, 8))]
    got = ops.quantized_matmul_bt_concat(x, weights).numpy()
    expected = np.concatenate([ops.quantized_matmul_bt(x, w).numpy() for w in weights], axis=1)
    assert got.shape == (m, 960) and np.array_equal(got, expected)


def test_bad_arguments_name_the_op():
    x = metalrt.asarray(np.zeros((1, 64), np.float32))
    w = q4_1(5, 64, "cpu")
    with pytest.raises(ValueError, match=r"\[quantized_matmul_bt_add\] residual"):
        ops.quantized_matmul_bt_add(x, w, np.zeros((1, 4), np.float32))
    with pytest.raises(ValueError, match=r"\[quantized_matmul_bt_swiglu\] w must have an even"):
        ops.quantized_matmul_bt_swiglu(x, w)
    with pytest.raises(TypeError, match=r"\[quantized_matmul_bt_swiglu\] w must be a metalrt.QuantizedTensor"):
        ops.quantized_matmul_bt_swiglu(x, np.zeros((4, 64), np.float32))
    with pytest.raises(TypeError, match=r"\[quantized_matmul_bt_concat\] weights must be a list"):
        ops.quantized_matmul_bt_concat(x, w)
    with pytest.raises(ValueError, match=r"\[quantized_matmul_bt_concat\] expected 2 or 3 weights"):
        ops.quantized_matmul_bt_concat(x, [w, w, w, w])
    cache = metalrt.asarray(np.zeros((1, 16, 1, 8), np.float32))
    with pytest.raises(ValueError, match=r"\[qkv_rope_cache\] qkv must have"):
        ops.qkv_rope_cache(np.zeros((1, 16), np.float32), [0], cache, cache, [0], 1, 8, 1e4)
