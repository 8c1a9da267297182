"""Quantized weights: dequantize bit-exact against gguf.quants.dequantize (GGUF) and
scales * q + biases in float32 (MLX affine) on random data for every format and bit
width, on each device; the zero-copy wrapping of numpy arrays and np.memmap views;
the ops' results against numpy; and the errors for bad input."""
import gc

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants

import metalrt
from conftest import poisoned
from metalrt import ops

# format -> (values per block, bytes per block, offsets of the block's f16 fields)
GGUF = {
    "q4_0": (32, 18, (0,)), "q4_1": (32, 20, (0, 2)), "q5_0": (32, 22, (0,)),
    "q5_1": (32, 24, (0, 2)), "q8_0": (32, 34, (0,)), "q4_k": (256, 144, (0, 2)),
    "q5_k": (256, 176, (0, 2)), "q6_k": (256, 210, (208,)),
    "q3_k": (256, 110, (108,)), "q2_k": (256, 84, (80, 82)),
}


def random_blocks(fmt, n, k, seed):
    """Random GGUF rows: random codes, finite random f16 scales (a quarter negative)."""
    values, size, halves = GGUF[fmt]
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(n, k // values, size), dtype=np.uint8)
    for offset in halves:
        d = rng.uniform(0.002, 0.05, size=data.shape[:2]) * rng.choice([-1, 1, 1, 1], size=data.shape[:2])
        data[:, :, offset:offset + 2] = d.astype(np.float16)[..., None].view(np.uint8)
    return data.reshape(n, -1)


def random_affine(bits, group, n, k, seed, scale_dtype=np.float32):
    """MLX affine: codes packed LSB first as a contiguous bitstream per row, scales of
    both signs; returns (words, scales, biases, float32 reference)."""
    rng = np.random.default_rng(seed)
    q = rng.integers(0, 2 ** bits, size=(n, k), dtype=np.uint64)
    bitplanes = ((q[..., None] >> np.arange(bits, dtype=np.uint64)) & 1).astype(np.uint8)
    words = np.packbits(bitplanes.reshape(n, -1), axis=1, bitorder="little").view(np.uint32)
    scales = (rng.uniform(0.002, 0.05, (n, k // group)) * rng.choice([-1, 1], (n, k // group))).astype(scale_dtype)
    biases = rng.uniform(-0.4, 0.4, (n, k // group)).astype(scale_dtype)
    s32 = np.repeat(scales.astype(np.float32), group, axis=1)
    b32 = np.repeat(biases.astype(np.float32), group, axis=1)
    return words, scales, biases, s32 * q.astype(np.float32) + b32


def bits_of(t):
    return np.asarray(t).view(np.uint32)


@pytest.mark.parametrize("fmt", sorted(GGUF))
def test_gguf_dequantize_is_bit_exact(fmt, device):
    k = 512 if fmt.endswith("_k") else 96
    data = random_blocks(fmt, 5, k, seed=len(fmt) + k)
    reference = quants.dequantize(data, getattr(GGMLQuantizationType, fmt.upper()))
    w = metalrt.quantized_tensor(fmt, (5, k), data, device=device)
    out = poisoned((5, k), "float32", device)
    result = ops.dequantize(w, out=out)
    assert result.data_ptr() == out.data_ptr()
    np.testing.assert_array_equal(bits_of(result), reference.view(np.uint32))


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_affine_dequantize_is_bit_exact(bits, group, device):
    words, scales, biases, reference = random_affine(bits, group, 3, 384, seed=bits * group)
    w = metalrt.quantized_tensor("affine", (3, 384), words, scales, biases, bits=bits, group_size=group,
                                 device=device)
    assert (w.format, w.shape, w.bits, w.group_size, w.device) == ("affine", (3, 384), bits, group, device)
    assert w.nbytes == words.nbytes + scales.nbytes + biases.nbytes
    np.testing.assert_array_equal(bits_of(ops.dequantize(w)), reference.view(np.uint32))


@pytest.mark.parametrize("scale_dtype", ["float16", "bfloat16"])
def test_affine_half_scales(scale_dtype, device):
    words, scales, biases, _ = random_affine(4, 64, 2, 128, seed=3)
    s = metalrt.asarray(scales, device=device, dtype=scale_dtype)
    b = metalrt.asarray(biases, device=device, dtype=scale_dtype)
    w = metalrt.quantized_tensor("affine", (2, 128), metalrt.asarray(words, device=device), s, b,
                                 bits=4, group_size=64)
    q = ((words[..., None] >> np.arange(0, 32, 4, dtype=np.uint32)) & 15).reshape(2, 128).astype(np.float32)
    reference = np.repeat(np.asarray(s), 64, 1) * q + np.repeat(np.asarray(b), 64, 1)
    np.testing.assert_array_equal(bits_of(ops.dequantize(w)), reference.view(np.uint32))


def test_matmul_and_embedding_against_numpy(device):
    data = random_blocks("q4_1", 7, 576, seed=1)
    dense = quants.dequantize(data, GGMLQuantizationType.Q4_1).astype(np.float64)
    w = metalrt.quantized_tensor("q4_1", (7, 576), data, device=device)
    x = np.random.default_rng(2).uniform(-1, 1, (3, 576)).astype(np.float32)
    for m in (1, 3):   # the GEMV on Metal; m > 8 is gated in the op-case table
        reference = x[:m].astype(np.float64) @ dense.T
        # On the CPU the oracle is gated here (the fast provider's int8 activations
        # are within 1e-7, docs/cpu.md; gated in the op-case table).
        for fast, bar in ((False, 1e-12), (True, 1e-12 if device != "cpu" else 1e-7)):
            metalrt.providers.set_enabled("cpu_fast_quantized_matmul_bt", fast)
            try:
                got = np.asarray(ops.quantized_matmul_bt(metalrt.asarray(x[:m], device=device), w),
                                 np.float64)
            finally:
                metalrt.providers.set_enabled("cpu_fast_quantized_matmul_bt", True)
            assert np.sum((got - reference) ** 2) / np.sum(reference ** 2) < bar
    rows = ops.quantized_embedding(metalrt.asarray(np.array([6, 0, 6], np.int32), device=device), w,
                                   dtype="bfloat16")
    assert rows.dtype == "bfloat16" and rows.shape == (3, 576)
    expected = np.asarray(metalrt.asarray(dense[[6, 0, 6]].astype(np.float32), dtype="bfloat16"))
    np.testing.assert_array_equal(np.asarray(rows), expected)


def test_memmap_views_are_wrapped_without_a_copy(tmp_path, device):
    data = random_blocks("q8_0", 4, 64, seed=9)
    floats = np.random.default_rng(3).uniform(-1, 1, 40).astype(np.float32)
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\0" * 24 + data.tobytes() + floats.tobytes())   # tensors inside one file
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    block_view = mapped[24:24 + data.nbytes].reshape(4, -1)
    float_view = mapped[24 + data.nbytes:].view(np.float32)
    w = metalrt.quantized_tensor("q8_0", (4, 64), block_view, device=device)
    f = metalrt.asarray(float_view, device=device, copy=False)
    assert w.data.data_ptr() == block_view.ctypes.data
    assert f.data_ptr() == float_view.ctypes.data and f.dtype == "float32"
    del mapped, block_view, float_view
    gc.collect()   # the tensors keep the mapping alive
    np.testing.assert_array_equal(np.asarray(f), floats)
    reference = quants.dequantize(data, GGMLQuantizationType.Q8_0)
    np.testing.assert_array_equal(bits_of(ops.dequantize(w)), reference.view(np.uint32))


def test_asarray_without_copy_takes_bfloat16_bits_and_refuses_conversions(device):
    values = np.array([1.0, -2.5, 3.0e38], np.float32)
    bf16_bits = (values.view(np.uint32) >> 16).astype(np.uint16)
    t = metalrt.asarray(bf16_bits, device=device, dtype="bfloat16", copy=False)
    assert t.dtype == "bfloat16" and t.data_ptr() == bf16_bits.ctypes.data
    np.testing.assert_array_equal(np.asarray(t), (bf16_bits.astype(np.uint32) << 16).view(np.float32))
    with pytest.raises(TypeError, match="needs an array of float16"):
        metalrt.asarray(values, device=device, dtype="float16", copy=False)
    with pytest.raises(ValueError, match="C-contiguous"):
        metalrt.asarray(np.zeros((4, 4), np.float32)[:, 1], device=device, copy=False)


def test_read_only_memory_wrapped_without_copy_is_never_written(tmp_path, device):
    # Before, a read-only np.memmap wrapped with copy=False was an ordinary tensor:
    # out= or copy_from wrote the read-only mapping and the interpreter died (SIGSEGV).
    path = tmp_path / "ro.bin"
    np.arange(16, dtype=np.float32).tofile(path)
    ro = metalrt.asarray(np.memmap(path, np.float32, mode="r", shape=(1, 16)), device=device, copy=False)
    x = metalrt.asarray(np.ones((1, 16), np.float32), device=device)
    with pytest.raises(ValueError, match=r"^\[relu\] out is a view of read-only memory"):
        ops.relu(x, out=ro)
    with pytest.raises(ValueError, match=r"^\[add\] out is a view of read-only memory"):
        ops.add(x, x, out=ro[0:1])      # views keep the flag
    with pytest.raises(ValueError, match=r"^copy_from: the tensor is a view of read-only memory"):
        ro.copy_from(np.zeros((1, 16), np.float32))
    np.testing.assert_array_equal(ro.numpy(), np.arange(16, dtype=np.float32)[None])
    np.testing.assert_array_equal(ops.relu(ro).numpy(), np.arange(16, dtype=np.float32)[None])
    rw = metalrt.asarray(np.memmap(path, np.float32, mode="r+", shape=(1, 16)), device=device, copy=False)
    negative = metalrt.asarray(-np.ones((1, 16), np.float32), device=device)
    ops.relu(negative, out=rw)       # a writable mapping is still an out
    metalrt.synchronize(device)
    np.testing.assert_array_equal(np.fromfile(path, np.float32), np.zeros(16, np.float32))


def test_read_only_caches_and_kernel_outputs_are_refused(tmp_path):
    # Before, reshape_and_cache into a read-only memmap, or a compile_shader kernel
    # writing one, died with SIGSEGV.
    path = tmp_path / "ro.bin"
    np.zeros(2 * 16 * 1 * 4, np.float32).tofile(path)
    mapped = np.memmap(path, np.float32, mode="r", shape=(2, 16, 1, 4))
    writable = np.zeros((2, 16, 1, 4), np.float32)
    kv = np.ones((1, 1, 4), np.float32)
    for dev in ("cpu", "metal"):
        ro = metalrt.asarray(mapped, device=dev, copy=False)
        assert ro.read_only and ro[0].read_only
        assert not metalrt.asarray(writable, device=dev, copy=False).read_only
        rw = metalrt.asarray(writable, device=dev)
        k = metalrt.asarray(kv, device=dev)
        with pytest.raises(ValueError, match=r"^\[reshape_and_cache\] key_cache is a view of read-only memory"):
            ops.reshape_and_cache(k, k, ro, rw, [3])
        with pytest.raises(ValueError, match=r"^\[reshape_and_cache\] value_cache is a view of read-only memory"):
            ops.reshape_and_cache(k, k, rw, ro, [3])
    lib = metalrt.compile_shader(
        "kernel void copy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],\n"
        "                 uint i [[thread_position_in_grid]]) { y[i] = x[i] + 1.0f; }\n")
    ro = metalrt.asarray(mapped.reshape(-1), device="metal", copy=False)
    y = metalrt.asarray(np.full(128, np.nan, np.float32), device="metal")
    with pytest.raises(ValueError, match=r"^\[copy\] argument 1 is a view of read-only memory .*"
                                         r"its parameter \(device float\*\) is writable"):
        lib.copy(y, ro, threads=128, group_size=32)
    lib.copy(ro, y, threads=128, group_size=32)      # read through a const parameter
    np.testing.assert_array_equal(y.numpy(), np.ones(128, np.float32))
    np.testing.assert_array_equal(np.fromfile(path, np.float32), np.zeros(128, np.float32))


def test_out_of_range_sizes_and_foreign_byte_order_are_clear_errors():
    # Before, each was nanobind's "incompatible function arguments" TypeError listing
    # the private binding's signature.
    blocks = np.zeros((2, 18), np.uint8)
    with pytest.raises(ValueError, match=r"^\[quantized_tensor\] shape must be \[N >= 1, K >= 1\], "
                                         r"got \[1180591620717411303424, 32\]"):
        metalrt.quantized_tensor("q4_0", (2**70, 32), blocks)
    with pytest.raises(ValueError, match=r"^\[quantized_tensor\] bits 1099511627776 is not a supported bits"):
        metalrt.quantized_tensor("affine", (2, 64), np.zeros((2, 8), np.uint32), np.ones((2, 1), np.float32),
                                 np.zeros((2, 1), np.float32), bits=2**40, group_size=64)
    with pytest.raises(TypeError, match=r"^asarray\(copy=False\): the array's elements are in non-native "
                                        r"byte order \(>f4\)"):
        metalrt.asarray(np.zeros(4, ">f4"), copy=False)
    with pytest.raises(TypeError, match=r"non-native byte order \(>f4\)"):
        metalrt.quantized_tensor("affine", (2, 64), np.zeros((2, 8), np.uint32), np.ones((2, 1), ">f4"),
                                 np.zeros((2, 1), np.float32), bits=4, group_size=64)


def test_to_moves_every_part():
    words, scales, biases, reference = random_affine(5, 32, 2, 64, seed=4)
    w = metalrt.quantized_tensor("affine", (2, 64), words, scales, biases, bits=5, group_size=32)
    if metalrt.is_available("metal"):
        moved = w.to("metal")
        assert moved.device == "metal" and moved.scales.device == "metal" and moved.biases.device == "metal"
        np.testing.assert_array_equal(bits_of(ops.dequantize(moved)), reference.view(np.uint32))
    assert w.to("cpu").data.data_ptr() == w.data.data_ptr()


@pytest.mark.parametrize("args, kwargs, error, message", [
    (("q4_1", (2, 64), np.zeros((2, 39), np.uint8)), {}, ValueError,
     r"data must have shape \[2, 40\], got \[2, 39\] \(truncated"),
    (("iq4_xs", (2, 256), np.zeros((2, 136), np.uint8)), {}, ValueError, "unknown format 'iq4_xs'"),
    (("q3_k", (2, 512), np.zeros((2, 219), np.uint8)), {}, ValueError,
     r"data must have shape \[2, 220\], got \[2, 219\] \(truncated"),
    (("affine", (2, 64), np.zeros((2, 8), np.uint32), np.ones((2, 2), np.float16),
      np.ones((2, 2), np.float16)), {"bits": 7, "group_size": 32}, ValueError, "bits must be one of"),
    (("affine", (2, 96), np.zeros((2, 12), np.uint32), np.ones((2, 2), np.float16),
      np.ones((2, 2), np.float16)), {"bits": 4, "group_size": 48}, ValueError, "group_size must be one of"),
    (("affine", (2, 64), np.zeros((2, 8), np.uint32), np.ones((2, 1), np.float16),
      np.ones((2, 1), np.float16)), {"bits": 4, "group_size": 32}, ValueError,
     r"scales must have shape \[2, 2\], got \[2, 1\]"),
    (("q8_0", (2, 32), [1, 2]), {}, TypeError, "data must be a metalrt.Tensor or a numpy array"),
])
def test_bad_input_is_a_clear_error(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        metalrt.quantized_tensor(*args, **kwargs)


def test_ops_refuse_a_dense_weight_and_mismatched_x():
    w = metalrt.quantized_tensor("q8_0", (2, 32), random_blocks("q8_0", 2, 32, seed=1))
    with pytest.raises(TypeError, match=r"\[quantized_matmul_bt\] w must be a metalrt.QuantizedTensor"):
        ops.quantized_matmul_bt(np.zeros((1, 32), np.float32), np.zeros((2, 32), np.float32))
    with pytest.raises(ValueError, match=r"\[quantized_matmul_bt\] x must have K=32 columns"):
        ops.quantized_matmul_bt(np.zeros((1, 64), np.float32), w)
    with pytest.raises(TypeError, match=r"\[dequantize\] dtype must be float32"):
        ops.dequantize(w, dtype="int32")
