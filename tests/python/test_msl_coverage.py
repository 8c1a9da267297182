"""MSL coverage gate: ggml's Metal kernel library (llama.cpp) on the simulated device,
unchanged.

ggml's sources are fetched at test time (ggml_metal_source.py: the pinned
llama-cpp-python sdist, sha256-checked, cached, never committed). Every kernel library
ggml builds must compile through ``metalrt.compile_shader`` with ggml's own compile
options, and a handful of kernels run with ggml's own argument structs (built byte for
byte from ``ggml-metal-impl.h``'s field order) against numpy, in two fiber orders, on
NaN-poisoned outputs. A failed download fails the gate; it is never skipped.

The kernels are compiled with g++, whose `_Float16` is the shim's `half` (a real
arithmetic type: ggml's `c ? half : float` conditionals have C's conversions, and its
block structs' anonymous members are plain scalars); the generator rewrites the GNU
array range designators `{ [0 ... N-1] = 0.0f }` of mul_mv.metal and fa_common.metal
(msl_syntax.py).
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import metalrt
import ggml_metal_source as ggml
from ggml_metal_source import CXX, compile_library

pytestmark = pytest.mark.skipif(not metalrt.is_available("metal"), reason="no Metal device")

# The libraries of the pinned version (ggml-metal-device.m, GGML_METAL_LIBS); the
# fetched directory must hold exactly these.
LIBRARIES = (
    "argsort", "binbcast", "conv", "fa_aux", "fa_f16", "fa_f32", "fa_q4_0", "fa_q4_1",
    "fa_q5_0", "fa_q5_1", "fa_q8_0", "fa_vec_f16", "fa_vec_f32", "fa_vec_q4_0",
    "fa_vec_q4_1", "fa_vec_q5_0", "fa_vec_q5_1", "fa_vec_q8_0", "gated_delta_net", "misc",
    "mul_mm", "mul_mv", "norm", "pool", "quantize", "reduce", "rope", "softmax",
    "solve_tri", "ssm", "tri", "unary", "upscale", "wkv")
ORDERS = ("forward", "shuffle:7")


@pytest.fixture(scope="module")
def source() -> Path:
    return ggml.source_dir()


def test_the_fetched_library_is_the_pinned_one(source):
    assert tuple(p.stem for p in ggml.kernel_files(source)) == LIBRARIES


@pytest.mark.parametrize("name", LIBRARIES)
def test_every_ggml_kernel_library_compiles_unchanged(source, name, monkeypatch):
    monkeypatch.setenv("CXX", CXX)
    library = compile_library(source, name)
    text = (source / f"{name}.metal").read_text()
    # Every [[host_name]] outside the tensor-API branch (GGML_METAL_HAS_TENSOR is
    # not defined) and every kernel that is not a template (never named with template
    # arguments: a template's header may span lines) is a kernel of the library.
    text = re.sub(r"#ifdef GGML_METAL_HAS_TENSOR.*?#(else|endif)", "", text, flags=re.S)
    names = set(re.findall(r'host_name\("(\w+)"\)', text))
    names |= {k for k in re.findall(r"\bkernel\s+void\s+(\w+)\s*\(", text)
              if not re.search(rf"\b{k}\s*<", text)}
    assert names and names <= set(library.function_names), sorted(names - set(library.function_names))


# --- ggml's argument structs, by the header's field order --------------------------

_CTYPES = {"int8_t": np.int8, "uint8_t": np.uint8, "int16_t": np.int16, "uint16_t": np.uint16,
           "int32_t": np.int32, "uint32_t": np.uint32, "int64_t": np.int64,
           "uint64_t": np.uint64, "float": np.float32, "bool": np.bool_}


def kargs_dtype(header: str, name: str) -> np.dtype:
    """The numpy dtype of ``typedef struct { ... } name;`` in ``header``, fields in
    declaration order with C alignment (every field is a fixed-width scalar or an
    array of one)."""
    m = re.search(r"typedef\s+struct\s*\{([^{}]*)\}\s*" + name + r"\s*;", header)
    assert m, f"{name} is not in ggml-metal-impl.h"
    fields = []
    for decl in m.group(1).split(";"):
        decl = re.sub(r"//[^\n]*", "", decl).strip()
        if decl:
            f = re.fullmatch(r"(\w+)\s+(\w+)\s*(?:\[(\d+)\])?", decl)
            assert f and f.group(1) in _CTYPES, f"{name}: cannot lay out '{decl}'"
            shape = (int(f.group(3)),) if f.group(3) else ()
            fields.append((f.group(2), _CTYPES[f.group(1)], shape))
    return np.dtype(fields, align=True)


def kargs(header: str, name: str, **values) -> bytes:
    """The bytes of ``name`` with ``values`` set (every field must be given)."""
    dt = kargs_dtype(header, name)
    assert set(values) == set(dt.names), f"{name}: fields {set(dt.names) ^ set(values)}"
    record = np.zeros((), dtype=dt)
    for k, v in values.items():
        record[k] = v
    return record.tobytes()


# --- the kernels that run, each case in a subprocess per fiber order ---------------

def _device(values, dtype="float32"):
    return metalrt.asarray(np.ascontiguousarray(values), device="metal", dtype=dtype)


def _poisoned(n_bytes):
    return metalrt.asarray(np.full(n_bytes // 4, np.nan, np.float32), device="metal")


def case_unary_scale(directory, header, rng):
    """kernel_unary_f32_f32 with FC op SCALE: y = scale * x + bias, bit-exact."""
    ne00, ne01 = 100, 3
    x = rng.standard_normal((ne01, ne00)).astype(np.float32)
    scale, bias = np.float32(0.75), np.float32(-0.125)
    nb = (4, 4 * ne00, 4 * ne00 * ne01, 4 * ne00 * ne01)
    args = kargs(header, "ggml_metal_kargs_unary", ne00=ne00, ne01=ne01, ne02=1, ne03=1,
                 nb00=nb[0], nb01=nb[1], nb02=nb[2], nb03=nb[3], ne0=ne00, ne1=ne01, ne2=1, ne3=1,
                 nb0=nb[0], nb1=nb[1], nb2=nb[2], nb3=nb[3], slope=0, scale=scale, bias=bias,
                 val=0, min=0, max=0)
    lib = compile_library(directory, "unary")
    out = _poisoned(x.nbytes)
    nth = 32
    lib["kernel_unary_f32_f32"](args, _device(x), out,
                                threadgroups=(ne01 * -(-ne00 // nth), 1, 1), group_size=(nth, 1, 1),
                                constants={1200: 10, 1201: False})   # FC_UNARY + 0/1
    got = out.numpy().reshape(ne01, ne00)
    np.testing.assert_array_equal(got, scale * x + bias)


def case_rms_norm(directory, header, rng):
    """kernel_rms_norm_f32_4: y = x / sqrt(mean(x^2) + eps), NMSE < 1e-12 vs float64
    (the sum order differs from numpy's)."""
    ne00, ne01 = 256, 5
    x = rng.standard_normal((ne01, ne00)).astype(np.float32)
    eps = np.float32(1e-6)
    row = 4 * ne00
    args = kargs(header, "ggml_metal_kargs_norm", ne00=ne00, ne00_t=ne00 // 4, nb1=row,
                 nb2=row * ne01, nb3=row * ne01, eps=eps, nef1=[ne01, 1, 1], nef2=[1, 1, 1],
                 nef3=[1, 1, 1], nbf1=[row, 0, 0], nbf2=[row * ne01, 0, 0],
                 nbf3=[row * ne01, 0, 0], scale=1.0)
    lib = compile_library(directory, "norm")
    src = _device(x)
    out = _poisoned(x.nbytes)
    lib["kernel_rms_norm_f32_4"](args, src, src, src, out,
                                 threadgroups=(ne01, 1, 1), group_size=(64, 1, 1),
                                 constants={1700: False}, threadgroup_memory={0: 32 * 4})
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt(np.mean(x64 ** 2, axis=1, keepdims=True) + float(eps))
    got = out.numpy().reshape(ne01, ne00).astype(np.float64)
    assert np.all(np.isfinite(got))
    assert np.sum((got - want) ** 2) / np.sum(want ** 2) < 1e-12


def case_mul_mv_q8_0(directory, header, rng):
    """kernel_mul_mv_q8_0_f32 (the quantized GEMV): y = W x with W in Q8_0 blocks made
    by gguf.quants, against gguf's dequantization @ x in float64; NMSE < 1e-12. Each
    threadgroup computes N_R0_Q8_0 = 2 rows with N_SG_Q8_0 = 4 SIMD-groups striding
    over the blocks and reducing through the threadgroup buffer; 19 rows leave the
    last threadgroup with one, and 80 blocks a partial stride of 4 * 8 blocks."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize
    ne00, ne01 = 2560, 19
    w = rng.standard_normal((ne01, ne00)).astype(np.float32)
    q = quantize(w, GGMLQuantizationType.Q8_0)
    x = rng.standard_normal(ne00).astype(np.float32)
    nb01 = q.shape[1]
    nr0, nsg = 2, 4   # N_R0_Q8_0, N_SG_Q8_0
    args = kargs(header, "ggml_metal_kargs_mul_mv", ne00=ne00, ne01=ne01, ne02=1, nb00=34,
                 nb01=nb01, nb02=nb01 * ne01, nb03=nb01 * ne01, ne10=ne00, ne11=1, ne12=1,
                 nb10=4, nb11=4 * ne00, nb12=4 * ne00, nb13=4 * ne00, ne0=ne01, ne1=1, nr0=nr0,
                 r2=1, r3=1)
    lib = compile_library(directory, "mul_mv")
    out = _poisoned(4 * ne01)
    lib["kernel_mul_mv_q8_0_f32"](args, _device(q, "uint8"), _device(x), out,
                                  threadgroups=(-(-ne01 // nr0), 1, 1), group_size=(32, nsg, 1),
                                  constants={600: nsg, 602: 1, 603: 1, 604: 1},   # nsg, ne12, r2, r3
                                  threadgroup_memory={0: 32 * 4 * nr0})
    want = dequantize(q, GGMLQuantizationType.Q8_0).astype(np.float64) @ x.astype(np.float64)
    got = out.numpy().astype(np.float64)
    assert np.all(np.isfinite(got))
    assert np.sum((got - want) ** 2) / np.sum(want ** 2) < 1e-12


def case_bin_fuse_mul_f16(directory, header, rng):
    """kernel_bin_fuse_f16_f16_f16 with FC op MUL, one src1 row broadcast over src0's
    rows (ne11 = 1): half * half rounded once per product, bit-exact against numpy's
    float16 multiply."""
    ne00, ne01 = 100, 6
    a = rng.standard_normal((ne01, ne00)).astype(np.float16)
    b = rng.standard_normal(ne00).astype(np.float16)
    row = 2 * ne00
    args = kargs(header, "ggml_metal_kargs_bin", ne00=ne00, ne01=ne01, ne02=1, ne03=1, nb00=2,
                 nb01=row, nb02=row * ne01, nb03=row * ne01, ne10=ne00, ne11=1, ne12=1, ne13=1,
                 nb10=2, nb11=row, nb12=row, nb13=row, ne0=ne00, ne1=ne01, ne2=1, ne3=1, nb0=2,
                 nb1=row, nb2=row * ne01, nb3=row * ne01, offs=0, o1=[0] * 8)
    lib = compile_library(directory, "binbcast")
    out = _device(np.full(a.shape, np.nan, np.float16), "float16")
    lib["kernel_bin_fuse_f16_f16_f16"](args, _device(a, "float16"), _device(b, "float16"), out,
                                       threadgroups=(ne01, 1, 1), group_size=(32, 1, 1),
                                       constants={1300: 2, 1301: 1, 1302: False, 1303: False})
    got = out.numpy().reshape(ne01, ne00)
    np.testing.assert_array_equal(got.view(np.uint16), (a * b[None, :]).view(np.uint16))


def case_rope_norm(directory, header, rng):
    """kernel_rope_norm_f32 (adjacent pairs rotated, no YaRN: ext_factor 0, freq_scale 1):
    pair (x[2i], x[2i+1]) of token t by theta = pos[t] * base^(-2i/n_dims); the
    reference in float64, NMSE < 1e-10 (the kernel's pow/sin/cos are float libm)."""
    ne00, ne01, ne02 = 64, 3, 5   # head_dim, heads, tokens
    n_dims, base = 48, 10000.0    # the last 16 components pass through unrotated
    x = rng.standard_normal((ne02, ne01, ne00)).astype(np.float32)
    pos = np.array([0, 1, 7, 130, 2047], np.int32)
    nb = (4, 4 * ne00, 4 * ne00 * ne01, 4 * ne00 * ne01 * ne02)
    args = kargs(header, "ggml_metal_kargs_rope", ne00=ne00, ne01=ne01, ne02=ne02, ne03=1,
                 nb00=nb[0], nb01=nb[1], nb02=nb[2], nb03=nb[3], ne0=ne00, ne1=ne01, ne2=ne02,
                 ne3=1, nb0=nb[0], nb1=nb[1], nb2=nb[2], nb3=nb[3], n_past=0, n_dims=n_dims,
                 n_offs=0, n_ctx_orig=4096, freq_base=base, freq_scale=1.0, ext_factor=0.0,
                 attn_factor=1.0, beta_fast=32.0, beta_slow=1.0, sect_0=0, sect_1=0, sect_2=0,
                 sect_3=0, src2=False, inplace=False)
    lib = compile_library(directory, "rope")
    out = _poisoned(x.nbytes)
    src = _device(x)
    lib["kernel_rope_norm_f32"](args, src, _device(pos, "int32"), src, out,
                                threadgroups=(ne01, ne02, 1), group_size=(16, 1, 1),
                                constants={800: False, 801: False})   # FC_ROPE + 0/1
    want = x.astype(np.float64)
    theta = pos[:, None].astype(np.float64) * base ** (-np.arange(0, n_dims, 2) / n_dims)
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x0, x1 = want[..., 0:n_dims:2].copy(), want[..., 1:n_dims:2].copy()
    want[..., 0:n_dims:2] = x0 * c - x1 * s
    want[..., 1:n_dims:2] = x0 * s + x1 * c
    got = out.numpy().reshape(x.shape).astype(np.float64)
    assert np.all(np.isfinite(got))
    np.testing.assert_array_equal(got[..., n_dims:], x[..., n_dims:])
    assert np.sum((got - want) ** 2) / np.sum(want ** 2) < 1e-10


def case_soft_max(directory, header, rng):
    """kernel_soft_max_f32 with an f32 mask (-inf on a causal triangle) and scale, 64
    threads (two SIMD-groups, through the threadgroup buffer): softmax(x * scale +
    mask) per row; masked elements exactly 0, the rest NMSE < 1e-12 vs float64."""
    ne00, ne01 = 100, 7
    x = (3 * rng.standard_normal((ne01, ne00))).astype(np.float32)
    mask = np.where(np.arange(ne00)[None, :] > 90 + np.arange(ne01)[:, None], -np.inf, 0.0)
    mask = (mask + rng.uniform(-1, 1, (ne01, ne00))).astype(np.float32)
    scale = np.float32(0.5)
    row = 4 * ne00
    args = kargs(header, "ggml_metal_kargs_soft_max", ne00=ne00, ne01=ne01, ne02=1, nb01=row,
                 nb02=row * ne01, nb03=row * ne01, ne11=ne01, ne12=1, ne13=1, nb11=row,
                 nb12=row * ne01, nb13=row * ne01, nb1=row, nb2=row * ne01, nb3=row * ne01,
                 scale=scale, max_bias=0.0, m0=0.0, m1=0.0, n_head_log2=0)
    lib = compile_library(directory, "softmax")
    src = _device(x)
    out = _poisoned(x.nbytes)
    # src2 bound to src0 means "no attention sinks" (the kernel compares the pointers).
    lib["kernel_soft_max_f32"](args, src, _device(mask), src, out, threadgroups=(ne01, 1, 1),
                               group_size=(64, 1, 1), threadgroup_memory={0: 32 * 4})
    z = x.astype(np.float64) * float(scale) + mask
    want = np.exp(z - z.max(axis=1, keepdims=True))
    want /= want.sum(axis=1, keepdims=True)
    got = out.numpy().reshape(ne01, ne00).astype(np.float64)
    assert np.all(np.isfinite(got))
    assert np.all(got[np.isinf(mask)] == 0.0)
    assert np.sum((got - want) ** 2) / np.sum(want ** 2) < 1e-12


CASES = {f.__name__: f for f in (case_unary_scale, case_rms_norm, case_mul_mv_q8_0,
                                  case_bin_fuse_mul_f16, case_rope_norm, case_soft_max)}


def run_case(name: str) -> None:
    """Entry point of the subprocess: runs one case on this process's device."""
    directory = ggml.source_dir()
    header = (directory / "ggml-metal-impl.h").read_text()
    CASES[name](directory, header, np.random.default_rng(20))


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_ggml_kernel_matches_numpy(source, case, order):
    # The fiber order is read when the device is created: one process per order.
    code = f"import test_msl_coverage as t; t.run_case({json.dumps(case)})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).parent, timeout=1200,
                          env={**os.environ, "METALRT_SIM_ORDER": order, "CXX": CXX})
    assert proc.returncode == 0, proc.stderr[-4000:]
