"""ops.embedding: bit-exact row gather."""
import numpy as np
import pytest

import metalrt
from conftest import (FLOAT_DTYPES, SUFFIX, assert_native, assert_same_bytes, poisoned, profiled, rand,
                      random_of, requires_metal)
from metalrt import ops


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + ("int8", "int32"))
@pytest.mark.parametrize("vocab, dim, tokens", [(1, 1, 1), (33, 31, 5), (49, 32, 33), (7, 33, 32)])
def test_gathers_rows_exactly(dtype, vocab, dim, tokens, device):
    rng = np.random.default_rng(vocab * dim + tokens)
    if dtype in FLOAT_DTYPES:
        table = rand((vocab, dim), seed=tokens, dtype=dtype)
    else:
        table = rng.integers(-100, 100, size=(vocab, dim))
    weight = metalrt.asarray(table, device=device, dtype=dtype)
    ids = rng.integers(0, vocab, size=tokens).astype(np.int32)
    ids[0] = vocab - 1                                        # the last row, and repeats
    out = poisoned((tokens, dim), dtype, device)
    result = ops.embedding(weight, ids, out=out)
    assert result.data_ptr() == out.data_ptr() and result.dtype == dtype
    np.testing.assert_array_equal(result.numpy(), table[ids].astype(result.numpy().dtype))
    np.testing.assert_array_equal(ops.embedding(weight, ids).numpy(), result.numpy())


def test_writes_only_the_rows_of_an_out_view(device):
    table = rand((10, 33), seed=3)
    base = rand((4, 33), seed=4)
    target = metalrt.asarray(base, device=device)
    ops.embedding(metalrt.asarray(table, device=device), np.array([7, 2], np.int32), out=target[1:3])
    expected = base.copy()
    expected[1:3] = table[[7, 2]]
    np.testing.assert_array_equal(target.numpy(), expected.astype(np.float32))


def test_numpy_inputs_follow_the_tensor_device(device):
    ids = metalrt.asarray(np.array([1, 0], np.int32), device=device)
    result = ops.embedding(np.eye(3, dtype=np.float32), ids)
    assert result.device == device
    np.testing.assert_array_equal(result.numpy(), np.eye(3)[[1, 0]])
    assert ops.embedding(np.eye(2, dtype=np.float32), np.array([1], np.int32)).device == "cpu"


@pytest.mark.parametrize("bad_id", [-1, 5, 2**31 - 1])
def test_out_of_range_ids(bad_id, device):
    weight = metalrt.zeros((5, 4), device=device)
    with pytest.raises(ValueError, match=r"^\[embedding\].*outside"):
        ops.embedding(weight, np.array([0, bad_id], np.int32))


def test_python_int_ids_become_int32(device):
    """mlx's convention: Python ints are int32, the ids dtype; a numpy int64 array is
    still refused (test_bad_inputs), never narrowed silently."""
    table = rand((40, 33), seed=7)
    weight = metalrt.asarray(table, device=device)
    for ids in ([39, 0, 17, 17], (5,), [np.int64(3), 2]):
        out = poisoned((len(ids), 33), "float32", device)
        ops.embedding(weight, ids, out=out)
        np.testing.assert_array_equal(out.numpy(), table[list(ids)].astype(np.float32))
    for bad in (2**31, -2**31 - 1, 2**64):
        with pytest.raises(ValueError, match=rf"^\[embedding\] ids: {bad} does not fit in int32"):
            ops.embedding(weight, [0, bad])
    with pytest.raises(ValueError, match=r"^\[embedding\].*outside"):
        ops.embedding(weight, [40])


def test_bad_inputs(device):
    weight = metalrt.zeros((5, 4), device=device)
    ids = metalrt.asarray(np.array([0, 1], np.int32), device=device)
    with pytest.raises(ValueError, match=r"^\[embedding\] weight must have rank 2"):
        ops.embedding(metalrt.zeros((5,), device=device), ids)
    with pytest.raises(ValueError, match=r"^\[embedding\] ids must have rank 1"):
        ops.embedding(weight, ids.reshape(1, 2))
    with pytest.raises(TypeError, match=r"^\[embedding\] ids must be int32, got int64"):
        ops.embedding(weight, np.array([0, 1]))
    with pytest.raises(ValueError, match=r"^\[embedding\] out must have shape \[2, 4\]"):
        ops.embedding(weight, ids, out=metalrt.zeros((3, 4), device=device))
    with pytest.raises(TypeError, match=r"^\[embedding\] out must be float32"):
        ops.embedding(weight, ids, out=metalrt.zeros((2, 4), dtype="float16", device=device))
    for bad in ("weights.bin", None, {"a": 1}, True):
        with pytest.raises(TypeError, match=r"^\[embedding\] weight must be a metalrt.Tensor"):
            ops.embedding(bad, ids)
    with pytest.raises(TypeError, match=r"^\[embedding\] out must be a metalrt.Tensor or None"):
        ops.embedding(weight, ids, out=np.zeros((2, 4), np.float32))


@requires_metal
@pytest.mark.parametrize("dtype", list(SUFFIX))
@pytest.mark.parametrize("vocab, dim, tokens", [(1, 1, 1), (49, 33, 32), (50272, 64, 5)])
def test_metal_kernel_equals_the_cpu_byte_for_byte(dtype, vocab, dim, tokens):
    table = random_of((vocab, dim), dtype, seed=vocab)
    ids = np.random.default_rng(tokens).integers(0, vocab, size=tokens).astype(np.int32)
    ids[0] = vocab - 1
    expected = ops.embedding(metalrt.asarray(table, dtype=dtype), ids)
    weight = metalrt.asarray(table, device="metal", dtype=dtype)
    out = poisoned((tokens, dim), dtype, "metal")
    metalrt.providers.reset_stats()
    rows = profiled(lambda: ops.embedding(weight, metalrt.asarray(ids, device="metal"), out=out))
    assert rows == {f"embedding_gather_{SUFFIX[dtype]}": 1, "total": 1}
    assert_native("embedding", "metal_embedding", 1)
    assert_same_bytes(out, expected)
