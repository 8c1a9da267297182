"""MXFP4 (FP4 E2M1 values sharing one E8M0 exponent per 32, OCP Microscaling Formats
v1.0) kept in its file's bytes, in both layouts: split ("mxfp4": MLX mode mxfp4,
gpt-oss's ``*_blocks`` / ``*_scales``) and GGUF block_mxfp4 ("mxfp4_gguf").

* dequantize and quantized_embedding bit-exact on each device against
  gguf.quants.dequantize (GGUF), transformers' convert_moe_packed_tensors and mlx's
  mx.dequantize (split; mlx runs in the bench's peers venv), on random codes under every
  E8M0 exponent 0..255. Exponent 255 is 2^128 as gguf-py and transformers compute it (±0
  stays ±0, ±0.5 is ±2^127, larger values ±inf); mlx reads it as an infinite scale
  (NaN for ±0, ±inf for ±0.5): the test asserts exactly where mlx parts;
* quantized_matmul_bt (the GEMV m = 1 and batched, the GEMM of a prefill) at
  gpt-oss-20b's shapes against the f64 dot of that reference, NaN-poisoned outputs,
  the quantized provider proven served (metalrt.providers.stats);
* loaders: ``mxfp4_from_blocks`` returns views of gpt-oss's tensors, an MLX mxfp4
  directory and a GGUF with MXFP4 tensors load in their bytes; a block of the wrong size,
  a scale tensor of the wrong shape are ValueErrors naming the file and the tensor.
"""
import subprocess

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf import quants
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

import metalrt
import quant_fixtures
from conftest import nmse, poisoned
from metalrt import ops, providers
from metalrt.loaders import load_model_files
from metalrt.loaders.quants import dequantize_weight, mxfp4_from_blocks
from tiny_models import TinyLlama, write_llama_gguf
from tiny_quant import MODERATE, split_tensors, write_mlx_mxfp4_dir


def gguf_rows(n, k, seed, exponents=MODERATE):
    """Random GGUF MXFP4 rows [n, k/32 * 17]: the E8M0 byte, then 16 bytes of codes."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (n, k // 32, 17), dtype=np.uint8)
    data[:, :, 0] = rng.integers(*exponents, (n, k // 32), dtype=np.uint8)
    return data.reshape(n, -1)


def every_exponent(scales):
    """scales with every E8M0 exponent 0..255 at its first 256 entries."""
    flat = scales.reshape(-1)
    flat[:256] = np.arange(256, dtype=np.uint8)
    return scales


def bits_of(t):
    return np.asarray(t).view(np.uint32)


def check_dequantize_and_embedding(fmt, data, scales, reference, device):
    n, k = reference.shape
    w = metalrt.quantized_tensor(fmt, (n, k), data, scales, device=device)
    assert (w.format, w.bits, w.group_size) == (fmt, 4, 32)
    out = ops.dequantize(w, out=poisoned((n, k), "float32", device))
    np.testing.assert_array_equal(bits_of(out), reference.view(np.uint32))
    ids = [n - 1, 0, n // 2, n - 1]
    rows = ops.quantized_embedding(metalrt.asarray(np.array(ids, np.int32), device=device), w,
                                   out=poisoned((len(ids), k), "float32", device))
    np.testing.assert_array_equal(bits_of(rows), reference[ids].view(np.uint32))


def test_gguf_dequantize_and_embedding_are_bit_exact(device):
    n, k = 12, 2880          # 1080 blocks: every exponent, and gpt-oss's hidden size
    data = gguf_rows(n, k, seed=3, exponents=(0, 256))
    data.reshape(-1, 17)[:256, 0] = np.arange(256, dtype=np.uint8)
    reference = quants.dequantize(data, T.MXFP4)
    assert np.isinf(reference).any() and (reference == 0).any()   # the extremes are in
    check_dequantize_and_embedding("mxfp4_gguf", data, None, reference, device)


def transformers_dequantize(blocks, scales):
    """float32 [E, N, K] by transformers' gpt-oss MXFP4 dequantize (which returns the
    experts transposed, [E, K, N])."""
    out = convert_moe_packed_tensors(torch.from_numpy(blocks), torch.from_numpy(scales),
                                     dtype=torch.float32)
    return out.transpose(1, 2).contiguous().numpy()


def test_split_dequantize_and_embedding_are_bit_exact_with_transformers(device):
    blocks, scales = split_tensors((2,), 6, 2880, seed=5, exponents=(0, 256))
    every_exponent(scales)
    w = mxfp4_from_blocks(blocks, scales, "test: blocks")
    reference = transformers_dequantize(blocks, scales).reshape(w.shape)
    np.testing.assert_array_equal(dequantize_weight(w).view(np.uint32), reference.view(np.uint32))
    check_dequantize_and_embedding("mxfp4", w.data, w.scales, reference, device)


_MLX_DEQUANTIZE = """
import sys
import mlx.core as mx
import numpy as np
words, scales = np.load(sys.argv[1]), np.load(sys.argv[2])
out = mx.dequantize(mx.array(words), mx.array(scales), None, group_size=32, bits=4,
                    mode="mxfp4", dtype=mx.float32)
np.save(sys.argv[3], np.array(out))
"""


def test_split_dequantize_is_bit_exact_with_mlx(tmp_path, device):
    """mlx's words: uint32 [N, K/8], value 0 in the low bits (the same bytes as
    gpt-oss's blocks). Every exponent but 255 is bit-exact; under 255, where mlx's
    infinite scale gives NaN (±0) or ±inf (±0.5), ours is ±0 and ±2^127."""
    try:
        python = quant_fixtures.peer_python("mlx")
    except quant_fixtures.FixtureUnavailable as e:
        pytest.fail(str(e))     # the peers venv is part of the test environment
    blocks, scales = split_tensors((), 24, 2880, seed=9, exponents=(0, 256))
    every_exponent(scales)
    words = np.ascontiguousarray(blocks).view(np.uint32).reshape(24, 2880 // 8)
    np.save(tmp_path / "w.npy", words)
    np.save(tmp_path / "s.npy", scales)
    subprocess.run([python, "-c", _MLX_DEQUANTIZE, tmp_path / "w.npy", tmp_path / "s.npy",
                    tmp_path / "out.npy"], check=True, capture_output=True)
    theirs = np.load(tmp_path / "out.npy")
    w = metalrt.quantized_tensor("mxfp4", (24, 2880), blocks.reshape(24, -1), scales, device=device)
    ours = np.asarray(ops.dequantize(w, out=poisoned((24, 2880), "float32", device)))
    at_255 = np.repeat(scales == 255, 32, axis=1)
    np.testing.assert_array_equal(ours[~at_255].view(np.uint32), theirs[~at_255].view(np.uint32))
    parted = at_255 & ~(np.isnan(theirs) & (ours == 0) | np.isinf(theirs) & (np.abs(ours) == 2.0 ** 127))
    np.testing.assert_array_equal(ours[parted].view(np.uint32), theirs[parted].view(np.uint32))
    assert at_255.sum() >= 32 and np.isnan(theirs[at_255]).any()


# (m, n, k) at gpt-oss-20b's shapes (hidden 2880, 64 heads of 64: q 4096 rows, k/v 512,
# o K = 4096; an expert's gate_up 5760 rows): a decode GEMV, a batched one, a prefill GEMM.
MATMUL_SHAPES = [(1, 4096, 2880), (1, 2880, 4096), (4, 512, 2880), (1, 5760, 2880), (40, 64, 2880)]


@pytest.mark.parametrize("shape", MATMUL_SHAPES, ids=lambda s: "m%dn%dk%d" % s)
@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp4_gguf"])
def test_matmul_against_the_reference_dot(fmt, shape, device):
    m, n, k = shape
    seed = m + n + k
    if fmt == "mxfp4":
        blocks, scales = split_tensors((), n, k, seed)
        data = blocks.reshape(n, -1)
        w_ref = dequantize_weight(mxfp4_from_blocks(blocks, scales))
    else:
        data, scales = gguf_rows(n, k, seed), None
        w_ref = quants.dequantize(data, T.MXFP4)
    x = np.random.default_rng(k).standard_normal((m, k)).astype(np.float32)
    w = metalrt.quantized_tensor(fmt, (n, k), data, scales, device=device)
    providers.reset_stats()
    y = ops.quantized_matmul_bt(metalrt.asarray(x, device=device), w,
                                out=poisoned((m, n), "float32", device))
    stats = providers.stats("quantized_matmul_bt", device)
    assert stats["calls"] == 1 and providers.stats("matmul_bt", device)["calls"] == 0
    if device == "cpu" and m <= 16:
        assert stats["last_selected"] == "cpu_fast_quantized_matmul_bt"
    assert not stats["last_selected"].startswith("reference")
    # The CPU's decode GEMV rounds x to two int8 bytes (docs/cpu.md), its prefill GEMM to bf16.
    bar = 3e-5 if device == "cpu" and m > 16 else 1e-7
    assert nmse(y, x.astype(np.float64) @ w_ref.astype(np.float64).T) < bar


def test_mxfp4_from_blocks_views_gpt_oss_tensors():
    blocks, scales = split_tensors((4,), 8, 64, seed=1)
    w = mxfp4_from_blocks(blocks, scales, "model.safetensors: tensor 'x_blocks'")
    assert (w.format, w.shape, w.bits, w.group_size) == ("mxfp4", (32, 64), 4, 32)
    assert np.shares_memory(w.data, blocks) and np.shares_memory(w.scales, scales)
    assert w.data.shape == (32, 32) and w.scales.shape == (32, 2) and w.nbytes == blocks.nbytes + scales.nbytes


@pytest.mark.parametrize("bad, match", [
    (lambda b, s: (b[..., :15], s), r"f\.safetensors: tensor 'e_blocks': blocks \[4, 8, 2, 15\] must be "
                                    r"\[\.\.\., N, K/32, 16\]"),
    (lambda b, s: (b, s[:, :, :1]), r"f\.safetensors: tensor 'e_blocks': scales \[4, 8, 1\] must be \[4, 8, 2\]"),
    (lambda b, s: (b, s.astype(np.float32)), r"scales must be a uint8 array, got float32"),
])
def test_mxfp4_from_blocks_bad_input_names_the_tensor(bad, match):
    blocks, scales = split_tensors((4,), 8, 64, seed=2)
    with pytest.raises(ValueError, match=match):
        mxfp4_from_blocks(*bad(blocks, scales), "f.safetensors: tensor 'e_blocks'")


@pytest.fixture
def backend():
    from metalrt.tokenizer import Tokenizer
    from tiny_models import tokenizer_metadata
    return Tokenizer.from_gguf_metadata(tokenizer_metadata()).backend


def test_mlx_mxfp4_directory_loads_in_its_bytes(tmp_path, backend):
    expected = write_mlx_mxfp4_dir(tmp_path, backend)
    files = load_model_files(tmp_path)
    for name, matrix in expected.items():
        w = files.weights[name]
        assert (w.format, w.shape) == ("mxfp4", matrix.shape)
        np.testing.assert_array_equal(dequantize_weight(w), matrix)


def test_mlx_mxfp4_scales_of_the_wrong_shape_name_file_and_tensor(tmp_path, backend):
    write_mlx_mxfp4_dir(tmp_path, backend, scale_shape_cut=True)
    with pytest.raises(ValueError, match=r"model\.safetensors: tensor 'model\.layers\.0\.self_attn\.k_proj"
                                         r"\.scales' is uint8 \[64, 3\]; .* needs uint8 E8M0 exponents \[64, 4\]"):
        load_model_files(tmp_path)


def test_gguf_mxfp4_truncated_blocks_name_file_and_tensor(tmp_path):
    """A file cut inside an MXFP4 tensor's blocks (a row of no whole block the gguf writer
    itself refuses): a ValueError naming the file and the tensor."""
    from metalrt.loaders.gguf_file import GGUFFile
    model = TinyLlama(layers=1, hidden=256, ffn=512, heads=4, kv_heads=2, head_dim=64)
    write_llama_gguf(tmp_path / "t.gguf", model, drop=("output_norm.weight",),
                     raw={"blk.0.ffn_down.weight": (gguf_rows(256, 512, seed=4), T.MXFP4)})
    last = max(GGUFFile(tmp_path / "t.gguf").tensors.values(), key=lambda t: t.offset)
    assert (last.name, last.ggml_type) == ("blk.0.ffn_down.weight", T.MXFP4)
    (tmp_path / "cut.gguf").write_bytes((tmp_path / "t.gguf").read_bytes()[:last.offset + last.nbytes - 1])
    with pytest.raises(ValueError, match=rf"cut\.gguf: tensor '{last.name}' data"):
        load_model_files(tmp_path / "cut.gguf")
