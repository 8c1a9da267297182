"""GGUF Q3_K and Q2_K (the 3- and 2-bit K-quants) kept in their block bytes: dequantize
and quantized_embedding bit-exact against gguf.quants.dequantize on random blocks with
extreme f16 scales (the largest finite, subnormal, signed zeros) on each device, and
quantized_matmul_bt (GEMV m = 1 and batched, GEMM for a prefill) against the f64 dot
of that reference, NaN-poisoned outputs, the quantized op proven served through
metalrt.providers.stats. Layouts: ggml-common.h block_q3_K / block_q2_K."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants

import metalrt
from conftest import nmse, poisoned
from metalrt import ops, providers

# format -> (gguf type, bytes per 256-value block, offsets of the block's f16 fields)
FORMATS = {"q3_k": (T.Q3_K, 110, (108,)), "q2_k": (T.Q2_K, 84, (80, 82))}
# f16 bit patterns at the edges of the range: the largest finite of both signs, the
# smallest subnormal, the smallest normal, +0 and -0.
# (A tuple: conftest's test ordering compares module globals with `in`.)
EXTREME_HALVES = (0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x0400, 0x0000, 0x8000)


def blocks(fmt, n, k, seed, extreme=False):
    """Random rows [n, k / 256 * bytes]: random codes and scale bytes, f16 fields of
    moderate random values or (extreme) drawn from EXTREME_HALVES."""
    _, size, halves = FORMATS[fmt]
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(n, k // 256, size), dtype=np.uint8)
    for offset in halves:
        if extreme:
            h = rng.choice(np.array(EXTREME_HALVES, np.uint16), size=data.shape[:2])
        else:
            h = (rng.uniform(0.002, 0.05, data.shape[:2]) * rng.choice([-1, 1, 1], data.shape[:2])
                 ).astype(np.float16).view(np.uint16)
        data[:, :, offset:offset + 2] = h[..., None].view(np.uint8)
    return data.reshape(n, -1)


def bits_of(t):
    return np.asarray(t).view(np.uint32)


@pytest.mark.parametrize("extreme", [False, True], ids=["random", "extreme"])
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_dequantize_and_embedding_are_bit_exact(fmt, extreme, device):
    n, k = 7, 768
    data = blocks(fmt, n, k, seed=11 + extreme, extreme=extreme)
    reference = quants.dequantize(data, FORMATS[fmt][0])
    assert np.isfinite(reference).all()
    w = metalrt.quantized_tensor(fmt, (n, k), data, device=device)
    assert (w.format, w.bits, w.group_size, w.nbytes) == (fmt, int(fmt[1]), 256, data.nbytes)
    out = ops.dequantize(w, out=poisoned((n, k), "float32", device))
    np.testing.assert_array_equal(bits_of(out), reference.view(np.uint32))
    ids = [6, 0, 3, 6]
    ids_t = metalrt.asarray(np.array(ids, np.int32), device=device)
    rows = ops.quantized_embedding(ids_t, w, out=poisoned((len(ids), k), "float32", device))
    np.testing.assert_array_equal(bits_of(rows), reference[ids].view(np.uint32))


# (m, n, k): GEMV m = 1 (the model's K = 576 is no K-quant shape: 768 is the hidden-768
# twin's, 1536 and 2048 its FFN's), batched GEMV m = 3 and 8, GEMM for a prefill m = 33.
MATMUL_SHAPES = [(1, 64, 768), (1, 96, 2048), (3, 40, 1536), (8, 33, 256), (33, 70, 512)]


@pytest.mark.parametrize("shape", MATMUL_SHAPES, ids=lambda s: "m%dn%dk%d" % s)
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_matmul_against_the_reference_dot(fmt, shape, device):
    m, n, k = shape
    data = blocks(fmt, n, k, seed=m + n + k)
    w_ref = quants.dequantize(data, FORMATS[fmt][0]).astype(np.float64)
    x = np.random.default_rng(k).standard_normal((m, k)).astype(np.float32)
    w = metalrt.quantized_tensor(fmt, (n, k), data, device=device)
    providers.reset_stats()
    y = ops.quantized_matmul_bt(metalrt.asarray(x, device=device), w,
                                out=poisoned((m, n), "float32", device))
    stats = providers.stats("quantized_matmul_bt", device)
    assert stats["calls"] == 1 and providers.stats("matmul_bt", device)["calls"] == 0
    # The CPU's decode GEMV rounds x to two int8 bytes (docs/cpu.md: NMSE <= 1e-7), its
    # prefill GEMM (m > 16) to bf16 (3e-5, test_cpu_fast_gemm.cpp).
    if device == "cpu" and m <= 16:
        assert stats["last_selected"] == "cpu_fast_quantized_matmul_bt"
    assert not stats["last_selected"].startswith("reference")
    bar = 3e-5 if device == "cpu" and m > 16 else 1e-7
    assert nmse(y, x.astype(np.float64) @ w_ref.T) < bar


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_loader_truncated_blocks_name_file_and_tensor(tmp_path, fmt):
    """A file cut inside the tensor's blocks: a ValueError naming the file and the tensor
    (a row of no whole block the gguf writer itself refuses; quantized_tensor's truncated
    data is gated in test_quantized.py)."""
    from metalrt.loaders import load_model_files
    from metalrt.loaders.gguf_file import GGUFFile
    from tiny_models import TinyLlama, write_llama_gguf
    qtype = FORMATS[fmt][0]
    model = TinyLlama(layers=1, hidden=256, ffn=512, heads=4, kv_heads=2, head_dim=64)
    write_llama_gguf(tmp_path / "t.gguf", model, drop=("output_norm.weight",),
                     raw={"blk.0.ffn_down.weight": (blocks(fmt, 256, 512, seed=1), qtype)})
    last = max(GGUFFile(tmp_path / "t.gguf").tensors.values(), key=lambda t: t.offset)
    whole = (tmp_path / "t.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(whole[:last.offset + last.nbytes - 1])
    with pytest.raises(ValueError, match=rf"cut\.gguf: tensor '{last.name}' data"):
        load_model_files(tmp_path / "cut.gguf")
