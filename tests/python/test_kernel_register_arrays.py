"""Issue #39 item 6: no kernel of metal/ indexes a private (thread) array with the
variable of a loop whose bounds are not compile-time or function constants (such a
loop cannot be unrolled, so the array would probably spill to stack memory on Apple
GPUs). The scan is metalrt/_sim/msl_register_arrays.py; the synthetic cases below test
the scanner itself."""
import pathlib

import pytest

from metalrt._sim import msl_register_arrays

ROOT = pathlib.Path(__file__).resolve().parents[2]

def test_no_kernel_indexes_a_register_array_with_a_runtime_bounded_loop():
    files = sorted((ROOT / "metal").glob("*.metal"))
    assert len(files) > 20
    findings = list(dict.fromkeys(str(f) for path in files for f in msl_register_arrays.scan(str(path))))
    assert not findings, "runtime-bounded loops over private arrays:\n" + "\n".join(findings)


def scan(tmp_path, body, prelude=""):
    path = tmp_path / "k.metal"
    path.write_text("#include <metal_stdlib>\nusing namespace metal;\n" + prelude +
                    "kernel void k(device float* out [[buffer(0)]], constant int& n [[buffer(1)]],\n"
                    "              uint tid [[thread_index_in_threadgroup]]) {\n" + body + "\n}\n")
    return msl_register_arrays.scan(str(path))


# The kernel body starts on line 5 of the file (two prelude lines, two of the kernel).
@pytest.mark.parametrize("body, array, variable, line", [
    ("  float a[8];\n  for (int i = 0; i < n; ++i) a[i] = 0;\n  out[0] = a[0];", "a", "i", 6),
    ("  float a[8];\n  for (int i = int(tid); i < 8; ++i) a[i] = 0;\n  out[0] = a[0];", "a", "i", 6),
    ("  float a[8];\n  for (int i = 0; i < 8; i += n) a[i] = 0;\n  out[0] = a[0];", "a", "i", 6),
    ("  const int m = min(n, 8);\n  float a[8][2];\n  for (int i = 0; i < m; ++i)\n"
     "    for (int j = 0; j < 2; ++j) a[i][j] = 0;", "a", "i", 7),
    ("  float a[8];\n  for (int i = 0; i < n; ++i) {\n    for (int j = 0; j < i; ++j) a[j] += 1;\n  }",
     "a", "j", 7),
    ("  float s = 0, acc[4];\n  for (int i = 0; i < n; ++i) acc[i % 4] = s;", "acc", "i", 6),
])
def test_a_runtime_bounded_loop_over_a_private_array_is_flagged(tmp_path, body, array, variable, line):
    findings = scan(tmp_path, body)
    assert [(f.location, f.array, f.variable) for f in findings] == [
        (f"{tmp_path / 'k.metal'}:{line}", array, variable)]
    assert str(findings[0]).startswith(findings[0].location + f": private array '{array}' is indexed by")


@pytest.mark.parametrize("prelude, body", [
    ("", "  float a[8];\n  for (int i = 0; i < 8; ++i) a[i] = 0;"),
    ("constant constexpr int K = 8;\n", "  float a[K];\n  for (int i = 0; i < K; ++i) a[i] = 0;"),
    ("constant int fc [[function_constant(0)]];\n",
     "  float a[8];\n  const int m = min(fc, 8);\n  for (int i = 0; i < m; ++i) a[i] = 0;"),
    ("constant int fc [[function_constant(0)]];\ninline int per_lane() { return (fc + 31) / 32; }\n",
     "  float a[8];\n  for (int i = 0; i < per_lane(); ++i) a[i] = 0;"),
    ("", "  float a[8];\n  for (int i = 0; i < 8; ++i)\n    for (int j = 0; j <= i; ++j) a[j] += a[i];"),
    ("", "  threadgroup float t[8];\n  for (int i = 0; i < n; ++i) t[i] = 0;"),
    ("", "  float a[8];\n  for (int p = 0; p < n; ++p)\n    for (int i = 0; i < 8; ++i) a[i] += p;"),
])
def test_constant_and_function_constant_bounds_are_not_flagged(tmp_path, prelude, body):
    assert scan(tmp_path, body, prelude) == []


def test_template_parameters_are_constant_bounds(tmp_path):
    path = tmp_path / "t.metal"
    path.write_text("#include <metal_stdlib>\nusing namespace metal;\n"
                    "template <typename T, int N>\n"
                    "kernel void t(device T* out [[buffer(0)]], constant int& n [[buffer(1)]]) {\n"
                    "  T a[N];\n  for (int i = 0; i < N; ++i) a[i] = T(0);\n"
                    "  T b[N];\n  for (int i = 0; i < n; ++i) b[i] = T(0);\n"
                    "  out[0] = a[0] + b[0];\n}\n"
                    'template [[host_name("t4")]] [[kernel]] decltype(t<float, 4>) t<float, 4>;\n')
    assert [(f.location.rsplit(":", 1)[1], f.array) for f in msl_register_arrays.scan(str(path))] == [("8", "b")]
