"""compile_shader parses a source once: on the simulated device the generator's one
run (msl_to_cpp.py, started by the C++ kernel compiler) writes both the C++ and the
reflection Python binds arguments by, and Python parses nothing itself; a cached
build parses nothing at all. On Apple's Metal, which compiles the source itself,
the reflection comes from one in-process run of the same generator, with the same
values."""
import os
import sys

import pytest

import metalrt
from metalrt import _metalrt
from metalrt._sim import msl_parse
from metalrt.shader import library

pytestmark = pytest.mark.skipif(
    not metalrt.is_available("metal") or not _metalrt.device_info("metal")["simulated"]
    or library.cxx_compiler() is None,
    reason="needs the simulated Metal device and a C++ compiler")

SOURCE = r"""
#include <metal_stdlib>
using namespace metal;
struct Params { uint n; float scale; float3 shift; };   // 4 + 4 + (8 padding) 16 -> 32
constant bool add_shift [[function_constant(0)]];
constant half gain [[function_constant(1)]];

kernel void scale(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  constant Params& p [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  if (i < p.n) y[i] = x[i] * p.scale + (is_function_constant_defined(add_shift) ? p.shift.x : 0.0f);
}

template <typename T>
kernel void fill(device T* out, constant T& value, uint i [[thread_position_in_grid]]) {
  out[i] = value * T(gain);
}
template [[host_name("fill_half")]] kernel void fill<half>(device half*, constant half&, uint);
"""

REFLECTION = {
    "function_constants": {"0": "bool", "1": "half"},
    "kernels": {"scale": {"0": "device const float*", "1": "device float*", "2": "constant Params&"},
                "fill_half": {"0": "device T*", "1": "constant T&"}},
    "structs": {"Params": 32},
}

# Runs the generator with its parse counted, one line per call in $PARSE_LOG.
SPY = r"""
import os, sys
sys.path.insert(0, {sim_dir!r})
import msl_parse, msl_to_cpp
real = msl_parse.parse
def counted(f):
    with open(os.environ["PARSE_LOG"], "a") as fh:
        fh.write("parse\n")
    return real(f)
msl_parse.parse = counted
sys.exit(msl_to_cpp.main())
"""


@pytest.fixture
def counted_parses(tmp_path, monkeypatch):
    """A list-returning function: how many parses ran (in the generator process and in
    this one) since the fixture started, with the kernel cache in tmp_path."""
    sim_dir = os.path.dirname(msl_parse.__file__)
    shim = os.path.join(sim_dir, "shim")
    spy_dir = tmp_path / "spy"
    spy_dir.mkdir()
    (spy_dir / "msl_to_cpp.py").write_text(SPY.format(sim_dir=sim_dir))
    log = tmp_path / "parses.log"
    log.write_text("")
    monkeypatch.setenv("PARSE_LOG", str(log))
    monkeypatch.setenv("METALRT_CACHE_DIR", str(tmp_path / "cache"))
    in_process = []
    real = msl_parse.parse
    monkeypatch.setattr(msl_parse, "parse", lambda f: in_process.append(1) or real(f))
    library._use_installed_toolchain()
    _metalrt._set_sim_toolchain(sys.executable, str(spy_dir / "msl_to_cpp.py"), shim)
    yield lambda: (len(log.read_text().splitlines()), len(in_process))
    _metalrt._set_sim_toolchain(sys.executable, os.path.join(sim_dir, "msl_to_cpp.py"), shim)


def _reflection_of(lib):
    return lib._constant_types, lib._kernel_params, lib._struct_sizes


def test_one_parse_per_compile_and_none_for_a_cached_one(counted_parses):
    lib = metalrt.compile_shader(SOURCE)
    assert counted_parses() == (1, 0)   # the generator's run, nothing in Python
    assert lib._constant_types == {0: "bool", 1: "half"}
    assert lib._kernel_params == {
        "scale": {0: "device const float*", 1: "device float*", 2: "constant Params&"},
        "fill_half": {0: "device T*", 1: "constant T&"}}
    assert lib._struct_sizes == {"Params": 32}
    again = metalrt.compile_shader(SOURCE)
    assert counted_parses() == (1, 0)   # built already: the cached reflection
    assert _reflection_of(again) == _reflection_of(lib)


def test_the_metal_path_parses_once_in_process_with_the_same_values(counted_parses):
    class AppleNative:   # what Apple's Metal library gives: no generator reflection
        def reflection(self):
            return ""

    assert library._reflection(AppleNative(), SOURCE) == REFLECTION
    assert counted_parses() == (0, 1)
    lib = metalrt.compile_shader(SOURCE)
    assert _reflection_of(library.ShaderLibrary(lib._native, REFLECTION)) == _reflection_of(lib)
