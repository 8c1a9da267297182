"""The simulated device's kernel cache ($METALRT_CACHE_DIR/kernels, cpp/sim/
kernel_compiler.cpp): a build is made in a scratch directory and renamed to its key
when complete, so a failed build (the generator's or the C++ compiler's) leaves
nothing a later run trusts or trips on; the key's directory of a completed build holds
the source, the module and the generator's reflection, and one left without a module
is rebuilt."""
import os

import numpy as np
import pytest

import metalrt

pytestmark = pytest.mark.skipif(
    not metalrt.is_available("metal") or not metalrt.device_info("metal")["simulated"],
    reason="only the simulated device builds kernels into a cache")

TWICE = r"""
#include <metal_stdlib>
using namespace metal;
kernel void twice(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  x[i] = 2.0f * x[i];
}
"""
# Rejected by the generator (MSL has no double), after the key directory was made.
DOUBLE = "kernel void f(device double* x [[buffer(0)]]) {}\n"


def run_twice(lib):
    x = metalrt.asarray(np.arange(8, dtype=np.float32), device="metal")
    lib.twice(x, threads=8, group_size=8)
    return x.numpy()


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("METALRT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "kernels"


def test_a_failed_compile_leaves_nothing_and_the_next_build_works(tmp_path, monkeypatch, kernels):
    # A compiler that preprocesses (the generator's step) but fails to build the module.
    cxx = os.environ.get("CXX") or "c++"
    failing = tmp_path / "failing-cxx"
    failing.write_text('#!/bin/sh\ncase "$*" in *-shared*) echo "cc1plus: out of memory" >&2; '
                       f'exit 1;; esac\nexec {cxx} "$@"\n')
    failing.chmod(0o755)
    monkeypatch.setenv("CXX", str(failing))
    with pytest.raises(RuntimeError, match=r"compiling the kernel failed:\ncc1plus: out of memory"):
        metalrt.compile_shader(TWICE)
    assert list(kernels.iterdir()) == []
    monkeypatch.setenv("CXX", cxx)
    np.testing.assert_array_equal(run_twice(metalrt.compile_shader(TWICE)), 2 * np.arange(8))
    [key] = list(kernels.iterdir())
    assert sorted(p.name for p in key.iterdir()) == ["module.so", "reflection.json", "shader.metal"]


def test_a_source_the_generator_rejects_leaves_nothing(kernels):
    with pytest.raises(RuntimeError, match=r"double"):
        metalrt.compile_shader(DOUBLE)
    assert not kernels.exists() or list(kernels.iterdir()) == []


def test_a_key_directory_without_its_module_is_rebuilt(kernels):
    run_twice(metalrt.compile_shader(TWICE))
    [key] = list(kernels.iterdir())
    (key / "module.so").unlink()   # what an interrupted build used to leave
    np.testing.assert_array_equal(run_twice(metalrt.compile_shader(TWICE)), 2 * np.arange(8))
    assert sorted(p.name for p in kernels.iterdir()) == [key.name]
    assert sorted(p.name for p in key.iterdir()) == ["module.so", "reflection.json", "shader.metal"]
