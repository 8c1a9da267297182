"""The MSL -> C++ generator of the simulated device (metalrt/_sim/msl_to_cpp.py):
which kernels it registers, how it binds every parameter attribute, the rewrites
it makes (lines preserved), and its errors at file.metal:line."""
import pathlib
import re

import pytest

from metalrt._sim import msl_to_cpp


def generate(tmp_path, source, name="k.metal", mode="builtin", **files):
    for rel, text in files.items():
        (tmp_path / rel).write_text(text)
    path = tmp_path / name
    path.write_text(source)
    text, _ = msl_to_cpp.generate(str(path), mode)
    return text


def kernel_rows(text):
    """(host name, buffer uses, threadgroup bits) of the generated kernel table."""
    uses = dict(re.findall(r"metalrt_buffers_(\d+)\[\] = \{(.*)\};", text))
    rows = re.findall(r'\{"([^"]+)", &metalrt_kernel_(\d+), metalrt_buffers_\d+, (\d+)u, (\d+)u,', text)
    return {name: (uses[i] if int(n) else "", int(bits)) for name, i, n, bits in rows}


def copied_source(text):
    """The copied .metal text between the #line directive and the namespace end."""
    return text.split('#line 1 "', 1)[1].split("\n", 1)[1].split("\n}  // namespace\n", 1)[0]


SOURCE = """#include <metal_stdlib>
using namespace metal;

constant bool has_bias [[function_constant(3)]];

// kernel void commented_out(device float* x [[buffer(0)]]) {}
kernel void add(device const float* a [[buffer(0)]],
                constant uint& n [[buffer(4)]],
                device float* bias [[buffer(2), function_constant(has_bias)]],
                uint gid [[thread_position_in_grid]]) {
  if (gid < n) bias[gid] += a[gid] + (is_function_constant_defined(has_bias) ? 1 : 0);
}

template <typename T>
[[kernel]] void scale(device T* x [[buffer(1)]],
                      threadgroup T* scratch [[threadgroup(2)]],
                      ushort2 lid [[thread_position_in_threadgroup]]) {
  threadgroup T tile[4][2 * 4], other[2];
  threadgroup T* alias = scratch;
  x[lid.x] = tile[0][lid.y] + other[0] + alias[0];
}

template [[host_name("scale_f32")]] [[kernel]] void scale<float>(
    device float* x [[buffer(1)]], threadgroup float* scratch [[threadgroup(2)]],
    ushort2 lid [[thread_position_in_threadgroup]]);
template [[host_name("scale_i32")]] [[kernel]] decltype(scale<int>) scale<int>;
"""


def test_registers_plain_kernels_and_host_named_instantiations(tmp_path):
    rows = kernel_rows(generate(tmp_path, SOURCE))
    assert set(rows) == {"add", "scale_f32", "scale_i32"}   # not the template, not the comment
    assert rows["add"] == ("{0u, -1}, {4u, -1}, {2u, 3}", 0)   # guarded by constant 3
    assert rows["scale_f32"] == ("{1u, -1}", 1 << 2)
    assert rows["scale_i32"] == rows["scale_f32"]


def test_binds_every_position_attribute(tmp_path):
    attrs = [("uint3", "thread_position_in_grid", "bind_position<A::at<{i}>, 3>(c.thread_position_in_grid)"),
             ("uint2", "threadgroup_position_in_grid", "bind_position<A::at<{i}>, 2>(c.threadgroup_position_in_grid)"),
             ("ushort3", "thread_position_in_threadgroup", "bind_position<A::at<{i}>, 3>(c.thread_position_in_threadgroup)"),
             ("uint", "thread_index_in_threadgroup", "static_cast<A::at<{i}>>(c.thread_index_in_threadgroup)"),
             ("ushort", "thread_index_in_simdgroup", "static_cast<A::at<{i}>>(c.thread_index_in_simdgroup)"),
             ("uint", "simdgroup_index_in_threadgroup", "static_cast<A::at<{i}>>(c.simdgroup_index_in_threadgroup)"),
             ("uint3", "threads_per_threadgroup", "bind_position<A::at<{i}>, 3>(c.threads_per_threadgroup)"),
             ("uint", "simdgroups_per_threadgroup", "static_cast<A::at<{i}>>(c.simdgroups_per_threadgroup)"),
             ("uint2", "threadgroups_per_grid", "bind_position<A::at<{i}>, 2>(c.threadgroups_per_grid)"),
             ("uint", "threads_per_grid", "bind_position<A::at<{i}>, 1>(c.threads_per_grid)"),
             ("uint", "thread_execution_width", "static_cast<A::at<{i}>>(c.threads_per_simdgroup)"),
             ("ushort", "threads_per_simdgroup", "static_cast<A::at<{i}>>(c.threads_per_simdgroup)")]
    params = ",\n".join(f"  {t} p{i} [[{a}]]" for i, (t, a, _) in enumerate(attrs))
    text = generate(tmp_path, f"kernel void k(\n{params}) {{}}\n")
    for i, (_, _, expected) in enumerate(attrs):
        assert "::metalrt::sim::" + expected.format(i=i) in text or expected.format(i=i) in text


def test_rewrites_keep_every_line_in_place(tmp_path):
    text = generate(tmp_path, SOURCE)
    copied = copied_source(text).rstrip("\n").split("\n")
    original = SOURCE.rstrip("\n").split("\n")
    assert len(copied) == len(original)
    for before, after in zip(original, copied):
        if "[[" in before and not before.startswith("//") and not before.startswith("constant"):
            # MSL attributes and the `kernel` keyword blanked, every column kept
            blank = re.sub(r"\[\[.*?\]\]", lambda m: " " * len(m.group()), before)
            assert after == re.sub(r"\bkernel\b", "      ", blank)
    line = {l.strip(): n for n, l in enumerate(copied)}
    tile = next(n for n, l in enumerate(copied) if "tile" in l and "threadgroup_variable" in l)
    assert tile == next(n for n, l in enumerate(original) if "threadgroup T tile" in l)
    where = f"{tmp_path / 'k.metal'}:{tile + 1}"
    assert f"threadgroup_variable<T[4][2*4]>(0u, \"'tile' ({where})\")" in copied[tile]
    assert f"threadgroup_variable<T[2]>(1u, \"'other' ({where})\")" in copied[tile]
    assert "threadgroup T* alias = scratch;" in line   # a pointer, not storage
    assert all("[[" not in l for l in copied if not l.startswith("//"))


def test_threadgroup_array_subscripts_are_bounds_checked(tmp_path):
    line = next(l for l in copied_source(generate(tmp_path, SOURCE)).split("\n") if "x[lid.x] =" in l)
    where = f'"{tmp_path / "k.metal"}:18"'
    assert line.strip() == (
        "x[lid.x] = "   # a device pointer: not checked
        f"tile[::metalrt::sim::threadgroup_index<decltype(tile), 0>(0, \"tile\", {where})]"
        f"[::metalrt::sim::threadgroup_index<decltype(tile), 1>(lid.y, \"tile\", {where})] + "
        f"other[::metalrt::sim::threadgroup_index<decltype(other), 0>(0, \"other\", {where})] + "
        "alias[0];")   # a pointer into threadgroup memory: not checked


def test_kernels_list_the_function_constants_they_require(tmp_path):
    text = generate(tmp_path, """constant int used [[function_constant(0)]];
constant int tested [[function_constant(1)]];
constant int unused [[function_constant(2)]];
inline int helper(int v) { return v * used; }
kernel void via_helper(device int* o [[buffer(0)]]) { o[0] = helper(1); }
kernel void tests_first(device int* o [[buffer(0)]]) {
  o[0] = is_function_constant_defined(tested) ? tested : 0;
}
kernel void uses_none(device int* o [[buffer(0)]]) { o[0] = 0; }
""")
    required = dict(re.findall(r"metalrt_required_(\d+)\[\] = \{(.*)\};", text))
    counts = dict(re.findall(r'\{"(\w+)", &metalrt_kernel_\d+,.*metalrt_required_\d+, (\d+)u, \d+u\}', text))
    assert counts == {"via_helper": "1", "tests_first": "0", "uses_none": "0"}
    via_helper = re.search(r'\{"via_helper", &metalrt_kernel_(\d+)', text).group(1)
    assert required[via_helper] == "0u"   # function constant 0 ('used'), reached through helper()


def test_program_scope_constants_become_cxx_constants(tmp_path):
    text = generate(tmp_path, "constant uint TILE = 16;\nconstant float w[2] = {1, 2};\n"
                              "kernel void f(constant uint& n [[buffer(0)]]) {\n"
                              "  constant float* p = w;\n}\n")
    copied = copied_source(text).split("\n")
    assert copied[0] == "const    uint TILE = 16;"
    assert copied[1] == "const    float w[2] = {1, 2};"
    assert copied[2].startswith("       void f(constant uint& n")   # a parameter keeps it
    assert copied[3] == "  const    float* p = w;"


def test_function_constants_become_pipeline_values(tmp_path):
    text = generate(tmp_path, SOURCE)
    assert "const bool& has_bias = metalrt_fc_value_0;" in text
    assert "(metalrt_fc_defined_0)" in text
    assert '{3u, "has_bias", 1u, &metalrt_fc_value_0, &metalrt_fc_defined_0}' in text


def test_quoted_headers_are_copied_in_place_with_their_kernels(tmp_path):
    header = ("#pragma once\ntemplate <typename T>\nkernel void fill(device T* o [[buffer(0)]],\n"
              "    uint i [[thread_position_in_grid]]) {\n  threadgroup T t[32];\n  o[i] = t[i % 32];\n}\n")
    text = generate(tmp_path, '#include "fill.h"\n#include "fill.h"\n'
                    'template [[host_name("fill_f32")]] kernel decltype(fill<float>) fill<float>;\n',
                    **{"fill.h": header})
    assert set(kernel_rows(text)) == {"fill_f32"}
    assert f'#line 1 "{tmp_path / "fill.h"}"' in text
    assert f'#line 3 "{tmp_path / "k.metal"}"' in text
    assert text.count("threadgroup_variable<T[32]>") == 1


def test_instantiations_made_by_macros_are_registered(tmp_path):
    header = ("#pragma once\ntemplate <typename T, int N>\n"
              "kernel void fill(device T* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
              "  o[i] = T(N);\n}\n"
              "#define instantiate_fill(tname, type, n) \\\n"
              "  template [[host_name(\"fill_\" #tname \"_\" #n)]] [[kernel]] \\\n"
              "  decltype(fill<type, n>) fill<type, n>;\n")
    text = generate(tmp_path, '#include "fill.h"\n'
                    "#define instantiate_all(n) instantiate_fill(f32, float, n) instantiate_fill(i32, int, n)\n"
                    "instantiate_all(1)\ninstantiate_fill(u8, uchar, 3)\n",
                    **{"fill.h": header})
    assert set(kernel_rows(text)) == {"fill_f32_1", "fill_i32_1", "fill_u8_3"}
    assert "fill<uchar, 3>(" in text
    code = text.split('#line 1 "', 1)[1]
    assert "#define" not in code and "[[" not in code   # expanded before translation, attributes blanked


def test_shared_mode_exports_the_module_entry(tmp_path):
    assert "METALRT_SIM_SHARED_MODULE(metalrt_module)" in generate(tmp_path, SOURCE, mode="shared")
    assert "METALRT_SIM_BUILTIN_MODULE(metalrt_module)" in generate(tmp_path, SOURCE)


@pytest.mark.parametrize("source, line, message", [
    ("kernel void f(device float* x, uint i) {}", 1,
     "parameter 'i' is neither in the device, constant or threadgroup address space"),
    ("kernel void f(device float* x [[buffer(N)]]) {}", 1,
     "[[buffer(N)]] needs an integer constant expression"),
    ("\nkernel void f(device float* x [[buffer(0)]],\n  uint q [[quad_lane_id]]) {}", 3,
     "unsupported attribute [[quad_lane_id]] on parameter 'q'"),
    ("kernel void f(float* x [[buffer(0)]]) {}", 1,
     "parameter 'x' is a pointer or reference without an address space"),
    ("kernel void f(device float* x,\n  const float& s [[buffer(1)]]) {}", 2,
     "parameter 's' is a pointer or reference without an address space"),
    ("kernel void f(device float* x,\n  const float* s) {}", 2, 'MSL 3.1 §4 "Address Spaces"'),
    ("kernel void f(device float* x [[buffer(31)]]) {}", 1, "out of range: Metal's buffer indices are 0..30"),
    ("template <typename T> kernel void f(device T* x [[buffer(0)]]) {}\n\n"
     "template [[kernel]] void f<float>(device float* x [[buffer(0)]]);", 3, "needs [[host_name"),
    ('template [[host_name("g")]] kernel decltype(g<float>) g<float>;', 1,
     "'g' is not a kernel template"),
    ("constant float s [[function_constant(0)]];\nconstant double d [[function_constant(1)]];", 2,
     "function constant type 'double' is not supported"),
    ('#include "missing.h"', 1, "cannot find included file 'missing.h'"),
    ("kernel void f(device float* x [[buffer(0)]]) {\n  threadgroup float t[2] = {0, 1};\n}", 2,
     "a threadgroup variable cannot have an initializer"),
    ("kernel void f(device float* x [[buffer(0)]]) {}\nkernel void f(device float* y [[buffer(0)]]) {}",
     2, "kernel 'f' defined twice"),
    ("\n[[max_total_threads_per_threadgroup(2048)]]\nkernel void f(device float* x [[buffer(0)]]) {}", 2,
     "kernel 'f': [[max_total_threads_per_threadgroup(2048)]] must be 1 to 1024, got 2048"),
    ("[[max_total_threads_per_threadgroup(n)]] kernel void f(device float* x [[buffer(0)]]) {}", 1,
     "[[max_total_threads_per_threadgroup(n)]] needs an integer constant expression"),
])
def test_errors_name_the_file_and_line(tmp_path, source, line, message):
    with pytest.raises(msl_to_cpp.MslError) as e:
        generate(tmp_path, source)
    assert str(e.value).startswith(f"{tmp_path / 'k.metal'}:{line}: error:")
    assert message in str(e.value)


def test_command_line_reports_errors_on_stderr(tmp_path, capsys):
    bad = tmp_path / "bad.metal"
    bad.write_text("\n\nkernel void f(device float* x, uint i) {}\n")
    assert msl_to_cpp.main([str(bad), str(tmp_path / "out.cpp")]) == 1
    assert f"{bad}:3: error:" in capsys.readouterr().err
    assert not (tmp_path / "out.cpp").exists()


# ---- issue #20: discovery on preprocessed source ----

def test_kernels_are_found_after_the_preprocessor_resolves_if_else(tmp_path):
    """Two definitions of a kernel in the two branches of #if/#else are one kernel
    (the text-based generator reported "defined twice")."""
    rows = kernel_rows(generate(tmp_path, """#define USE_FAST 1
#if USE_FAST
kernel void k(device float* x [[buffer(0)]]) { x[0] = 1; }
#else
kernel void k(device float* x [[buffer(1)]]) { x[0] = 2; }
#endif
"""))
    assert rows == {"k": ("{0u, -1}", 0)}


def test_attribute_indices_are_integer_constant_expressions(tmp_path):
    """[[function_constant(FC_UNARY + 0)]] and [[buffer(BASE + 1)]]: macros expanded,
    the expression evaluated (the text-based generator: "needs an integer index")."""
    text = generate(tmp_path, """#define FC_UNARY 1200
#define BASE 2
constant short FC_unary_op [[function_constant(FC_UNARY + 0)]];
constant bool FC_unary_cnt [[function_constant(FC_UNARY + (3 << 1) / 2)]];
kernel void k(device float* x [[buffer(BASE + 1)]], device float* y [[buffer(0x1)]],
              device float* z [[buffer(BASE * 3 - 1), function_constant(FC_unary_cnt)]]) {
  x[0] = FC_unary_op;
}
""")
    assert '{1200u, "FC_unary_op", 2u,' in text
    assert '{1203u, "FC_unary_cnt", 1u,' in text
    assert kernel_rows(text)["k"] == ("{3u, -1}, {1u, -1}, {5u, 1203}", 0)


def test_max_total_threads_per_threadgroup_is_recorded_per_kernel(tmp_path):
    text = generate(tmp_path, """#define THREADS 64
[[max_total_threads_per_threadgroup(2 * THREADS)]] kernel void capped(device float* x [[buffer(0)]]) {}
kernel void free_size(device float* x [[buffer(0)]]) {}
template <typename T>
[[max_total_threads_per_threadgroup(32)]]
kernel void t(device T* x [[buffer(0)]]) {}
template [[host_name("t_f32")]] [[kernel]] decltype(t<float>) t<float>;
""")
    limits = dict(re.findall(r'\{"(\w+)", &metalrt_kernel_\d+, .*, (\d+)u\},', text))
    assert limits == {"capped": "128", "free_size": "0", "t_f32": "32"}
    assert "max_total_threads_per_threadgroup" not in copied_source(text)   # blanked for C++


def test_unattributed_buffer_parameters_get_metals_implicit_indices(tmp_path):
    """device/constant (threadgroup) parameters without [[buffer(n)]] ([[threadgroup(n)]])
    take the lowest index no other parameter of the kernel has, in order (the
    text-based generator: "parameter 'args' has no [[buffer(n)]]")."""
    rows = kernel_rows(generate(tmp_path, """struct Args { int n; };
kernel void k(constant Args& args, device const float* a, device float* out [[buffer(1)]],
              device float* b, threadgroup float* s, threadgroup float* t [[threadgroup(0)]],
              uint i [[thread_position_in_grid]]) {}
"""))
    assert rows["k"] == ("{0u, -1}, {2u, -1}, {1u, -1}, {3u, -1}", (1 << 1) | (1 << 0))


def test_ggml_style_typedef_decltype_instantiations_are_registered(tmp_path):
    """`typedef decltype(f<...>) name; template [[host_name("n")]] kernel name f<...>;`
    as ggml-metal writes them, made by a macro."""
    text = generate(tmp_path, """#include <metal_stdlib>
using namespace metal;
template <typename T>
kernel void kernel_scale(constant float& s, device const T* src, device T* dst,
                         uint i [[thread_position_in_grid]]) { dst[i] = src[i] * T(s); }
typedef decltype(kernel_scale<float>) kernel_scale_t;
#define INSTANTIATE(name, T) template [[host_name(name)]] kernel kernel_scale_t kernel_scale<T>;
INSTANTIATE("kernel_scale_f32", float)
#if 0
INSTANTIATE("kernel_scale_f16", half)
#endif
""")
    assert kernel_rows(text) == {"kernel_scale_f32": ("{0u, -1}, {1u, -1}, {2u, -1}", 0)}
    assert "kernel_scale<float>(" in text


def test_errors_inside_headers_and_macros_point_at_the_original_line(tmp_path):
    with pytest.raises(msl_to_cpp.MslError) as e:
        generate(tmp_path, '#include "h.h"\n', **{"h.h": "\n\n#define K(n) kernel void n(uint i) {}\nK(f)\n"})
    assert str(e.value).startswith(f"{tmp_path / 'h.h'}:4: error:")


def test_defines_and_include_dirs_reach_the_preprocessor(tmp_path):
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "tile.h").write_text("#define TILE_INDEX (SLOT + 1)\n")
    path = tmp_path / "k.metal"
    path.write_text('#include "tile.h"\nkernel void k(device float* x [[buffer(TILE_INDEX)]]) {}\n')
    text, files = msl_to_cpp.generate(str(path), defines={"SLOT": "4"},
                                      include_dirs=[str(tmp_path / "inc")])
    assert kernel_rows(text)["k"] == ("{5u, -1}", 0)
    assert str(tmp_path / "inc" / "tile.h") in files   # the depfile lists it
    with pytest.raises(msl_to_cpp.MslError, match=r"k\.metal:2: error: kernel 'k': \[\[buffer\(\(SLOT \+ 1\)\)\]\] needs an integer "
                       r"constant expression: 'SLOT' is neither an integer literal nor a macro"):
        msl_to_cpp.generate(str(path), include_dirs=[str(tmp_path / "inc")])


def test_every_kernel_file_of_the_package_passes_the_strict_translator():
    root = pathlib.Path(__file__).resolve().parents[2]
    files = sorted((root / "metal").glob("*.metal")) + sorted((root / "tests" / "msl").glob("*.metal"))
    assert len(files) > 20
    for path in files:
        text, deps = msl_to_cpp.generate(str(path))
        assert "metalrt_kernels[]" in text and str(path) in deps


def test_depfile_lists_every_project_header_read_and_no_metal_header(tmp_path):
    (tmp_path / "a.h").write_text('#pragma once\n#include <metal_stdlib>\n#include "b.h"\n')
    (tmp_path / "b.h").write_text("#define B 1\n")
    (tmp_path / "k.metal").write_text('#include "a.h"\nkernel void k(device float* x [[buffer(B)]]) {}\n')
    out, dep = tmp_path / "k.cpp", tmp_path / "k.cpp.d"
    assert msl_to_cpp.main([str(tmp_path / "k.metal"), str(out), "--depfile", str(dep)]) == 0
    target, deps = dep.read_text().split(": ", 1)
    assert target == str(out)
    assert deps.split() == [str(tmp_path / n) for n in ("k.metal", "a.h", "b.h")]
