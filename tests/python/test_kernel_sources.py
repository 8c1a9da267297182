"""The kernels as this build ships them for a Mac without Apple's Metal compiler:
metalrt.embedded_kernel_sources() holds one self-contained MSL string per
metal/*.metal file (project headers inlined, cpp/metal/embed_kernel_sources.py). The
simulated device compiles exactly those strings, each on its own (a header the
inlining missed fails here), and together they define the built-in library's
kernels. Also: the shipped kernels avoid the transposed simdgroup_load/store origin
whose meaning Apple does not document."""
import pathlib
import re

import pytest

import metalrt

ROOT = pathlib.Path(__file__).resolve().parents[2]
KERNEL_FILES = sorted(p.name for p in (ROOT / "metal").glob("*.metal"))

needs_metal = pytest.mark.skipif(not metalrt.is_available("metal"), reason="needs a Metal device")


def test_one_self_contained_source_per_kernel_file():
    sources = metalrt.embedded_kernel_sources()
    assert sorted(sources) == KERNEL_FILES
    for name, source in sources.items():
        assert not re.search(r'^\s*#\s*include\s*"', source, re.M), f"{name} still includes a project header"
        assert "kernel void" in source, name
    # The headers really are inlined: a constant every row kernel uses is defined in the text.
    assert re.search(r"kRowThreads\s*=\s*256", sources["rms_norm.metal"])


@needs_metal
def test_the_simulated_device_compiles_each_embedded_source_to_the_builtin_kernels():
    info = metalrt.metal_library_info()
    builtin = set(info["kernels"])
    assert builtin, "the built-in library lists no kernels"
    compiled = {}
    for name, source in metalrt.embedded_kernel_sources().items():
        compiled[name] = set(metalrt.compile_shader(source).function_names)
        assert compiled[name], f"{name} defines no kernels"
    union = set().union(*compiled.values())
    assert sum(len(names) for names in compiled.values()) == len(union), "a kernel is defined twice"
    assert union == builtin


@needs_metal
def test_library_info_names_the_device_the_selection_and_the_library():
    info = metalrt.metal_library_info()
    assert info["device"] == metalrt.device_info("metal")["name"]
    if "simulated" in info["device"]:
        assert info["selection"].startswith("sim")
        assert info["library"].startswith("the simulated device's kernels, compiled into the binary")
    else:
        assert info["selection"].startswith("native")
        assert info["library"].startswith(("metallib at ", "compiled at run time from embedded sources, each file on the first use"))
    assert info["kernels"] == sorted(info["kernels"]) and "matmul_bt_gemm_f32" in info["kernels"]


def _calls(text, function):
    """Argument lists (split at top-level commas) of every call of `function` in `text`."""
    for match in re.finditer(rf"\b{function}\s*\(", text):
        depth, at, args, start = 1, match.end(), [], match.end()
        while depth:
            c = text[at]
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            elif c == "," and depth == 1:
                args.append(text[start:at].strip())
                start = at + 1
            at += 1
        args.append(text[start:at - 1].strip())
        yield args


@pytest.mark.parametrize("name", KERNEL_FILES)
def test_transposed_simdgroup_matrix_access_has_origin_zero(name):
    """With transpose_matrix, whether a non-zero matrix_origin is read in the source's or
    the transposed matrix's coordinates is not in Apple's documentation; an offset
    pointer with origin 0 means the same under either reading (the shim reads the
    transposed one, so the sim cannot tell)."""
    text = (ROOT / "metal" / name).read_text()
    for function in ("simdgroup_load", "simdgroup_store"):
        for args in _calls(text, function):
            if len(args) == 5 and args[4] != "false":
                assert re.fullmatch(r"(ulong2\(\s*0\s*,\s*0\s*\)|0)", args[3]), \
                    f"{name}: {function} with transpose and origin {args[3]}"
