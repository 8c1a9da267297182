"""compile_shader's compile options and byte arguments (issue #20 item 2): macros
(`defines=`), quoted includes from `headers=` (a dict or a directory), and `constant`
arguments given as Python numbers, small numpy arrays or bytes (structs by their
byte layout), sized against the declared parameter type. Each kernel computes
something checked against numpy; outputs are NaN-poisoned first."""
import numpy as np
import pytest

import metalrt

pytestmark = pytest.mark.skipif(not metalrt.is_available("metal"), reason="no Metal device")

SCALE = r"""
#include <metal_stdlib>
#include "scale_args.h"
using namespace metal;
#ifndef FACTOR
#error FACTOR must be defined
#endif
kernel void scale(device const float* x, device float* y, constant ScaleArgs& args,
                  uint i [[thread_position_in_grid]]) {
  if (i < uint(args.n)) y[i] = x[i] * FACTOR * args.mul + args.add + EXTRA;
}
"""
SCALE_ARGS = """#pragma once
struct ScaleArgs { int n; float mul; float add; int unused; };
"""
ARGS_DTYPE = np.dtype([("n", np.int32), ("mul", np.float32), ("add", np.float32), ("unused", np.int32)])


def metal(a):
    return metalrt.asarray(np.ascontiguousarray(a), device="metal")


def run_scale(lib, args, n=37):
    x = np.linspace(-2, 2, n, dtype=np.float32)
    y = metal(np.full(n, np.nan, np.float32))
    lib.scale(metal(x), y, args, threads=n, group_size=32)
    return x, y.numpy()


@pytest.mark.parametrize("as_dir", [False, True])
def test_defines_and_headers_with_a_struct_argument_as_bytes(tmp_path, as_dir):
    if as_dir:
        (tmp_path / "scale_args.h").write_text(SCALE_ARGS)
        headers = str(tmp_path)
    else:
        headers = {"scale_args.h": SCALE_ARGS}
    lib = metalrt.compile_shader(SCALE, defines={"FACTOR": 3, "EXTRA": "0.25f"}, headers=headers)
    args = np.array([(37, 0.5, -1.0, 0)], ARGS_DTYPE)
    x, y = run_scale(lib, args.tobytes())
    np.testing.assert_array_equal(y, x * np.float32(3) * np.float32(0.5) + np.float32(-1) + np.float32(0.25))
    x, y2 = run_scale(lib, args)   # a structured numpy array binds its bytes too
    np.testing.assert_array_equal(y2, y)


def test_defines_change_the_compiled_code():
    a = metalrt.compile_shader(SCALE, defines={"FACTOR": 2, "EXTRA": 0}, headers={"scale_args.h": SCALE_ARGS})
    b = metalrt.compile_shader(SCALE, defines={"FACTOR": 4, "EXTRA": 0}, headers={"scale_args.h": SCALE_ARGS})
    args = np.array([(37, 1.0, 0.0, 0)], ARGS_DTYPE).tobytes()
    x, ya = run_scale(a, args)
    _, yb = run_scale(b, args)
    np.testing.assert_array_equal(ya, x * 2)
    np.testing.assert_array_equal(yb, x * 4)


def test_missing_define_or_header_is_a_compile_error_at_its_line():
    with pytest.raises(RuntimeError, match=r"shader\.metal:6: error: #error FACTOR must be defined"):
        metalrt.compile_shader(SCALE, headers={"scale_args.h": SCALE_ARGS})
    with pytest.raises(RuntimeError, match=r"shader\.metal:3: error: cannot find included file 'scale_args\.h'"):
        metalrt.compile_shader(SCALE, defines={"FACTOR": 1, "EXTRA": 0})


DIMS = r"""
#include <metal_stdlib>
using namespace metal;
kernel void fill(device float* out, constant uint2& dims, constant float& value,
                 constant half& h, uint2 p [[thread_position_in_grid]]) {
  if (p.x < dims.x && p.y < dims.y) out[p.y * dims.x + p.x] = value * float(p.y * dims.x + p.x) + float(h);
}
"""


def test_vector_and_scalar_constant_arguments_from_numpy_and_python():
    lib = metalrt.compile_shader(DIMS)
    rows, cols = 5, 7
    out = metal(np.full(rows * cols, np.nan, np.float32))
    lib.fill(out, np.array([cols, rows], np.uint32), 0.5, 0.25, threads=(cols, rows), group_size=(8, 8))
    np.testing.assert_array_equal(out.numpy(), np.arange(rows * cols, dtype=np.float32) * 0.5 + 0.25)


@pytest.mark.parametrize("args, error, message", [
    ((np.array([7], np.uint32), 0.5, 0.25), ValueError,
     r"\[fill\] argument 1 \(constant uint2&\) takes 8 bytes, got 4 bytes"),
    ((np.array([7, 5], np.int32), 0.5, 0.25), TypeError,
     r"\[fill\] argument 1 \(constant uint2&\) takes uint32 elements, got int32"),
    ((b"\0" * 12, 0.5, 0.25), ValueError, r"argument 1 \(constant uint2&\) takes 8 bytes, got 12 bytes"),
    ((np.array([7, 5], np.uint32), 1e39, 0.25), ValueError,
     r"argument 2 \(constant float&\): 1e\+39 does not fit in float32"),
    ((np.array([7, 5], np.uint32), 0.5, np.float32(1)), TypeError,
     r"argument 3 \(constant half&\) takes float16 elements, got float32"),
    ((7, 0.5, 0.25), TypeError, r"argument 1 \(constant uint2&\): a Python int binds only to a declared scalar"),
    ((np.zeros(2048, np.uint32), 0.5, 0.25), ValueError, r"8192 bytes; setBytes takes fewer than 4096"),
])
def test_constant_arguments_are_sized_against_the_declared_type(args, error, message):
    lib = metalrt.compile_shader(DIMS)
    out = metal(np.full(4, np.nan, np.float32))
    with pytest.raises(error, match=message):
        lib.fill(out, *args, threads=(2, 2), group_size=(2, 2))


LAST_BYTE = r"""
#include <metal_stdlib>
using namespace metal;
kernel void last_byte(device uint* out, constant uchar* bytes, constant uint& n,
                      uint i [[thread_position_in_grid]]) {
  if (i == 0) out[0] = uint(bytes[n - 1]);
}
"""


def test_set_bytes_takes_fewer_than_4096_bytes():
    # Apple: setBytes is for data smaller than 4 KB. 4095 bytes bind (the kernel reads the
    # last one back); 4096 are refused before anything is encoded.
    lib = metalrt.compile_shader(LAST_BYTE)
    out = metalrt.asarray(np.zeros(1, np.uint32), device="metal")
    data = np.zeros(4095, np.uint8)
    data[-1] = 201
    lib.last_byte(out, data, np.uint32(4095), threads=1, group_size=1)
    assert out.numpy()[0] == 201
    with pytest.raises(ValueError, match=r"4096 bytes; setBytes takes fewer than 4096: pass a metalrt.Tensor"):
        lib.last_byte(out, np.zeros(4096, np.uint8), np.uint32(4096), threads=1, group_size=1)


def test_struct_bytes_shorter_than_the_struct_are_refused():
    # 12 of ScaleArgs' 16 bytes used to bind: the kernel read past what setBytes copied.
    lib = metalrt.compile_shader(SCALE, defines={"FACTOR": 1, "EXTRA": 0},
                                 headers={"scale_args.h": SCALE_ARGS})
    short = np.array([(37, 1.0, 0.0, 0)], ARGS_DTYPE).tobytes()[:12]
    with pytest.raises(ValueError, match=r"^\[scale\] argument 2 \(constant ScaleArgs&\) takes a "
                                         r"struct ScaleArgs of 16 bytes \(MSL layout\), got 12 bytes$"):
        run_scale(lib, short)
    x, y = run_scale(lib, short + b"\0" * 8)   # more than sizeof is passed as given
    np.testing.assert_array_equal(y, x)


def test_bad_compile_options_raise():
    with pytest.raises(TypeError, match=r"\[compile_shader\] defines must be a dict"):
        metalrt.compile_shader(DIMS, defines=["FACTOR"])
    with pytest.raises(ValueError, match=r"\[compile_shader\] a macro name must be an identifier, got '1X'"):
        metalrt.compile_shader(DIMS, defines={"1X": 1})
    with pytest.raises(TypeError, match=r"\[compile_shader\] macro X must be a str, int, float or None, got list"):
        metalrt.compile_shader(DIMS, defines={"X": [1]})
    with pytest.raises(ValueError, match=r"\[compile_shader\] headers directory '/nonexistent' does not exist"):
        metalrt.compile_shader(DIMS, headers="/nonexistent")
    with pytest.raises(TypeError, match=r"\[compile_shader\] headers must map header names"):
        metalrt.compile_shader(DIMS, headers={"a.h": 3})
    with pytest.raises(ValueError, match=r"headers include each other more than 32 deep"):
        metalrt.compile_shader('#include "a.h"\n', headers={"a.h": '#include "a.h"\n'})


@pytest.mark.parametrize("value", ["1\r#error injected", "1 \\", "1 \\  ", float("nan"), float("inf")])
def test_a_define_that_is_not_one_finite_line_is_refused(value):
    # Before: a CR passed the one-line check (so a second line, "#error injected",
    # reached the compiler), a final backslash swallowed the #line after the macro, and
    # nan/inf became the names `nan`/`inf`; each a confusing compile error at best.
    with pytest.raises(ValueError, match=r"^\[compile_shader\] macro X must be (one line|a finite number)"):
        metalrt.compile_shader(DIMS, defines={"X": value})


GUARDED_A = """// a.h
#ifndef A_H
#define A_H
#include "b.h"
#define AV 3.0f
#endif
"""
GUARDED_B = """#ifndef B_H  // b.h
/* b's guard */
#define B_H
#include "a.h"
#define BV 4.0f
#endif
"""


@pytest.mark.parametrize("headers", ["dict", "directory"])
def test_guarded_headers_that_include_each_other_compile(headers, tmp_path):
    # Legal MSL (Apple's compiler stops at the guards); before, build_source inlined
    # the cycle until its depth limit: "headers include each other more than 32 deep".
    files = {"a.h": GUARDED_A, "b.h": GUARDED_B}
    if headers == "directory":
        for name, text in files.items():
            (tmp_path / name).write_text(text)
        files = str(tmp_path)
    lib = metalrt.compile_shader('#include "a.h"\nkernel void k(device float* y [[buffer(0)]], '
                                 'uint i [[thread_position_in_grid]]) { y[i] = AV * BV + float(i); }\n',
                                 headers=files)
    y = metal(np.full(4, np.nan, np.float32))
    lib.k(y, threads=4, group_size=4)
    np.testing.assert_array_equal(y.numpy(), np.array([12, 13, 14, 15], np.float32))


def test_metal_rejections_reach_compile_shader_with_the_spec_section():
    with pytest.raises(RuntimeError, match=r"shader\.metal:2: error: the double type is not supported in Metal "
                                           r"\(MSL 3\.1 §2\.1"):
        metalrt.compile_shader("kernel void k(device float* x [[buffer(0)]]) {\n  double d = x[0];\n}\n")
