"""The sim generator rejects what Apple's Metal compiler rejects but C++ accepts
(metalrt/_sim/msl_restrictions.py, issue #17 item 1): one small kernel per construct,
each rejected at file:line with the construct and the MSL 3.1 section named; the same
words in comments and string literals are not flagged."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from metalrt._sim import msl_to_cpp

METAL_DIR = pathlib.Path(__file__).resolve().parents[2] / "metal"

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"
KERNEL = "kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {{\n{body}\n}}\n"

# (name, source after HEAD, line of the construct, words of the message, section)
CASES = [
    ("double", KERNEL.format(body="  double d = x[i];"), 4, "the double type", "§2.1"),
    ("long_double", KERNEL.format(body="  long double d = 0;"), 4, "the double type", "§2.1"),
    ("long_long", KERNEL.format(body="  long long d = 0;"), 4, "the long long type", "§2.1"),
    ("std", KERNEL.format(body="  x[i] = std::max(x[i], 0.0f);"), 4, "std::", "§1.5.4"),
    ("new", KERNEL.format(body="  float* p = new float[4];"), 4, "the new operator", "§1.5.4"),
    ("delete", KERNEL.format(body="  device float* p = x;\n  delete p;"), 5, "the delete operator", "§1.5.4"),
    ("try", KERNEL.format(body="  try { x[i] = 0; } catch (...) {}"), 4, "exception handling (try)", "§1.5.4"),
    ("throw", KERNEL.format(body="  if (i > 4) throw 1;"), 4, "exception handling (throw)", "§1.5.4"),
    ("virtual", "struct S { virtual float f() { return 0; } };\n" + KERNEL.format(body=""), 3,
     "virtual functions", "§1.5.4"),
    ("thread_local", KERNEL.format(body="  thread_local float t = 0;"), 4, "thread_local", "§1.5.4"),
    ("register", KERNEL.format(body="  register float t = 0;"), 4, "register", "§1.5.4"),
    ("goto", KERNEL.format(body="  goto done;\ndone:\n  x[i] = 0;"), 4, "the goto statement", "§1.5.4"),
    ("dynamic_cast", "struct B {};\n" + KERNEL.format(body="  thread B b; auto p = dynamic_cast<thread B*>(&b);"),
     5, "dynamic_cast", "§1.5.4"),
    ("typeid", KERNEL.format(body="  auto& t = typeid(x);"), 4, "typeid", "§1.5.4"),
    ("main", "kernel void main(device float* x [[buffer(0)]]) {}\n", 3, "a function named main", "§1.5.4"),
    ("program_scope_constexpr", "constexpr int kTile = 4;\n" + KERNEL.format(body="  x[i] = kTile;"), 3,
     "program-scope variable 'kTile'", "§4.2"),
    ("program_scope_variable", "\nfloat scale = 2;\n" + KERNEL.format(body="  x[i] = scale;"), 4,
     "program-scope variable 'scale'", "§4.2"),
    ("program_scope_in_namespace", "namespace n {\nconst float w[2] = {1, 2};\n}\n" + KERNEL.format(body=""),
     4, "program-scope variable 'w'", "§4.2"),
    ("int_max", KERNEL.format(body="  int best = INT_MAX;"), 4, "the C limit macro INT_MAX", "§6.18"),
    ("uint_max", KERNEL.format(body="  x[i] = UINT_MAX;"), 4, "the C limit macro UINT_MAX", "§6.18"),
    ("char_bit", KERNEL.format(body="  x[i] = CHAR_BIT;"), 4, "the C limit macro CHAR_BIT", "§6.18"),
    ("dbl_max", KERNEL.format(body="  x[i] = DBL_MAX;"), 4, "the C limit macro DBL_MAX", "§6.18"),
    ("static_local", KERNEL.format(body="  static float calls = 0;"), 4, "static variable 'calls'", "§4.2"),
    ("static_member", "struct S { static constexpr int n = 4; };\n" + KERNEL.format(body=""), 3,
     "static variable 'n'", "§4.2"),
]


@pytest.mark.parametrize("name, source, line, construct, section", CASES, ids=[c[0] for c in CASES])
def test_construct_metal_rejects_is_rejected_at_its_line(tmp_path, name, source, line, construct, section):
    path = tmp_path / f"{name}.metal"
    path.write_text(HEAD + source)
    with pytest.raises(msl_to_cpp.MslError) as e:
        msl_to_cpp.generate(str(path))
    message = str(e.value)
    assert message.startswith(f"{path}:{line}: error: "), message
    assert construct in message and f"MSL 3.1 {section}" in message, message


def test_non_metal_headers_are_rejected(tmp_path):
    path = tmp_path / "k.metal"
    path.write_text(HEAD + "#include <vector>\n")
    with pytest.raises(msl_to_cpp.MslError) as e:
        msl_to_cpp.generate(str(path))
    assert str(e.value).startswith(f"{path}:3: error: #include <vector> is not a Metal standard header")
    assert "MSL 3.1 §1.5.4" in str(e.value)


def test_non_metal_headers_are_rejected_where_the_compiler_finds_them(tmp_path, monkeypatch):
    """A compiler wrapper that adds its own -isystem directories (as the g++ of some CUDA
    images does for libstdc++; -nostdinc keeps them) finds <vector>, which then fails on
    a header of its own: the error is still Metal's, at the kernel's #include line, and
    at a project header's line when that is where <vector> is included."""
    system = tmp_path / "system"
    system.mkdir()
    (system / "vector").write_text("#include <bits/c++config.h>\n")
    compiler = os.environ.get("CXX") or "c++"
    monkeypatch.setenv("CXX", f"{compiler} -isystem {system}")
    path = tmp_path / "k.metal"
    path.write_text(HEAD + "#include <vector>\n")
    with pytest.raises(msl_to_cpp.MslError, match=rf"^{re.escape(str(path))}:3: error: #include <vector> "
                                                   "is not a Metal standard header"):
        msl_to_cpp.generate(str(path))
    (tmp_path / "h.h").write_text("#pragma once\n#include <vector>\n")
    path.write_text(HEAD + '#include "h.h"\n')
    with pytest.raises(msl_to_cpp.MslError, match=rf"^{re.escape(str(tmp_path / 'h.h'))}:2: error: "
                                                   "#include <vector> is not a Metal standard header"):
        msl_to_cpp.generate(str(path))
    # A header the compiler's directories supply in full (no preprocessor error at all),
    # and one named through a macro.
    (system / "float.h").write_text("#define FLT_MAX 3.4e38f\n")
    for include, name in (("#include <float.h>", "float.h"), ("#define HDR <float.h>\n#include HDR", "float.h")):
        path.write_text(HEAD + include + "\nconstant float big = FLT_MAX;\n")
        line = 3 + include.count("\n")
        with pytest.raises(msl_to_cpp.MslError, match=rf"^{re.escape(str(path))}:{line}: error: #include "
                                                       rf"<{re.escape(name)}> is not a Metal standard header"):
            msl_to_cpp.generate(str(path))


def test_what_metal_accepts_passes(tmp_path):
    """constant program-scope variables (and METALRT_CONSTANT), static constant members,
    static member functions, deleted functions, and the rejected words in comments,
    strings and names that only contain them."""
    path = tmp_path / "ok.metal"
    path.write_text(HEAD + '#include "metal_constants.h"\n' + """
METALRT_CONSTANT int kTile = 4;
constant float w[2] = {1, 2};
namespace n { constant constexpr int m = 2; }
constexpr constant static float table[2] = {1, 2};   // ggml's spelling
typedef struct { int n; float scale; } block_args;   // a type, not a variable
struct S {
  static constant constexpr int n = 4;
  static float twice(float v) { return 2 * v; }
  S(const thread S&) = delete;
};
// double, std::, new, goto and virtual in a comment
kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  const char* s = "double std::vector new delete";
  float doubled = S::twice(x[i]) * kTile * w[0] * n::m * table[1];   /* try { throw; } INT_MAX */
  doubled = min(doubled, FLT_MAX) + HALF_EPSILON * float(numeric_limits<int>::max() > 0);   // MSL's own
  x[i] = doubled + s[0];
}
""")
    text, _ = msl_to_cpp.generate(str(path), include_dirs=[str(METAL_DIR)])
    assert '{"k", &metalrt_kernel_0' in text


@pytest.mark.parametrize("tail", ['{ "abc ', "{ x[0] = 1;", "{ {"])
def test_an_unclosed_brace_ends_the_check(tmp_path, tail):
    # The program-scope scan once restarted from the top on an unclosed brace (an
    # unterminated string masks the rest): compile_shader never returned.
    path = tmp_path / "unclosed.metal"
    path.write_text(HEAD + "kernel void k(device float* x [[buffer(0)]]) " + tail)
    done = subprocess.run([sys.executable, "-c", "import sys; from metalrt._sim import msl_to_cpp\n"
                           "try:\n    msl_to_cpp.generate(sys.argv[1])\n"
                           "except msl_to_cpp.MslError as e:\n    print(e)\n", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
