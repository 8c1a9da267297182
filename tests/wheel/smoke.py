"""A user's first commands with an installed metalrt wheel, run outside the source
tree: `metalrt doctor`, `metalrt generate` with the default model (its reference
greedy continuation, DESIGN.md section 6), the CPU's BLAS GEMM (its library found at
run time), a compile_shader kernel, and, on the
simulated device, compile_shader's error when no C++ compiler is on PATH.

    python smoke.py [--no-model] [--require-metallib]

Exits non-zero with the failing check's message. tests/wheel/check_wheel.sh runs it
in a fresh venv; cibuildwheel runs it with --no-model after building each wheel, and
on macOS with --require-metallib: the wheel must ship metalrt.metallib (a macOS wheel
built without Apple's Metal compiler would compile every kernel at run time).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import metalrt

# The default model's greedy continuation of "Once upon a time" (token ids).
REFERENCE_CONTINUATION = [28, 260, 2240, 282, 23324, 27108, 436, 253, 15114, 39228]
SCALE = """
#include <metal_stdlib>
using namespace metal;
kernel void scale(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  constant float& factor [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  y[i] = factor * x[i];
}
"""


def run(*args: str, **env: str) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, env={**os.environ, **env})
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def check_not_from_source_tree() -> None:
    package = os.path.dirname(os.path.abspath(metalrt.__file__))
    if not package.split(os.sep)[-2] == "site-packages":
        sys.exit(f"metalrt was imported from {package}, not from an installed wheel")


def check_doctor() -> None:
    table = run("metalrt", "doctor")
    print(table)
    if "| metalrt " not in table or metalrt.doctor()["metalrt"] not in table:
        sys.exit("metalrt doctor did not report the installed version")


def check_generate() -> None:
    tokenizer = metalrt.load()[1]
    want = tokenizer.decode(REFERENCE_CONTINUATION)
    text = run("metalrt", "generate", "--prompt", "Once upon a time", "--max-tokens", "10")
    # mlx-lm's verbose format: the text between two "==========" lines, then the stats.
    parts = text.split("==========\n")
    if len(parts) < 3 or parts[1] != want + "\n":
        sys.exit(f"metalrt generate printed {text!r}; the reference continuation is {want!r}")


def check_cpu_blas() -> None:
    """A prefill-sized matmul_bt on the CPU runs through the BLAS provider under
    METALRT_CPU_GEMM=f32: the wheel's extension found OpenBLAS (scipy-openblas32, loaded
    by metalrt/_blas.py) or Accelerate."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 32), dtype=np.float32)
    b = rng.standard_normal((8, 32), dtype=np.float32)
    metalrt.providers.reset_stats()
    os.environ["METALRT_CPU_GEMM"] = "f32"   # the sgemm, not the bf16 GEMM ahead of it
    try:
        got = metalrt.ops.matmul_bt(metalrt.asarray(a), metalrt.asarray(b)).numpy()
    finally:
        del os.environ["METALRT_CPU_GEMM"]
    served = metalrt.providers.stats("matmul_bt", "cpu")["last_selected"]
    if served != "cpu_blas_matmul_bt":
        sys.exit(f"a 64-row matmul_bt on the CPU was served by {served!r}, not the BLAS GEMM")
    if not np.allclose(got, a @ b.T, rtol=1e-5, atol=1e-5):
        sys.exit("the BLAS GEMM's matmul_bt differs from numpy's")


def check_compile_shader() -> None:
    if not metalrt.is_available("metal"):
        sys.exit("no Metal device in this wheel")
    lib = metalrt.compile_shader(SCALE)
    x = metalrt.asarray(np.arange(300, dtype=np.float32), device="metal")
    y = metalrt.asarray(np.full(300, np.nan, np.float32), device="metal")
    lib.scale(x, y, np.float32(2.5), threads=300, group_size=64)
    if not np.array_equal(y.numpy(), 2.5 * np.arange(300, dtype=np.float32)):
        sys.exit(f"compile_shader's kernel computed {y.numpy()[:8]}...")


def check_metallib(package_dir: str, library_info: dict, native: bool) -> None:
    """metalrt.metallib is in `package_dir` (the extension's directory, where the native
    device loads it: DefaultLibraryPath in cpp/metal/metal_device.mm) and is a metallib
    (it starts with the magic "MTLB"). When the native device serves, `library_info`
    (metalrt.metal_library_info()) must say it loaded that file; a hosted macOS runner is
    a VM whose GPU is refused (the simulated device serves), so there only the file is
    checked. Exits with the reason otherwise."""
    path = os.path.join(package_dir, "metalrt.metallib")
    if not os.path.isfile(path):
        sys.exit(f"[smoke --require-metallib] no metalrt.metallib in {package_dir}: the wheel was "
                 "built without Apple's Metal compiler (docs/apple-validation.md, What you need)")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"MTLB":
        sys.exit(f"[smoke --require-metallib] {path} starts with {magic!r}, not a metallib's b'MTLB'")
    if not native:
        print(f"metalrt.metallib is in the wheel; not loaded here ({library_info['selection']})")
        return
    loaded = library_info["library"]
    prefix = "metallib at "
    if not (loaded.startswith(prefix) and os.path.samefile(loaded[len(prefix):], path)):
        sys.exit(f"[smoke --require-metallib] the native device's kernels come from {loaded!r}, "
                 f"expected 'metallib at {path}'")


def check_no_compiler_message() -> None:
    if not metalrt.device_info("metal")["simulated"]:
        return   # Metal compiles the kernel: no C++ compiler is involved
    with tempfile.TemporaryDirectory() as empty:
        code = ("import metalrt\ntry:\n    metalrt.compile_shader('kernel void f() {}')\n"
                "except RuntimeError as e:\n    print(e)\n")
        env = {k: v for k, v in os.environ.items() if k != "CXX"}
        env["PATH"] = empty
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=300, env=env).stdout
    if "none was found" not in out or "apt-get install g++" not in out:
        sys.exit(f"without a C++ compiler compile_shader said {out!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-model", action="store_true", help="skip the default model (a 98 MB download)")
    parser.add_argument("--require-metallib", action="store_true",
                        help="fail unless the wheel ships metalrt.metallib (macOS wheels)")
    args = parser.parse_args()
    if shutil.which("metalrt") is None:
        sys.exit("the metalrt console script is not on PATH")
    check_not_from_source_tree()
    check_doctor()
    if not args.no_model:
        check_generate()
    check_cpu_blas()
    check_compile_shader()
    check_no_compiler_message()
    if args.require_metallib:
        check_metallib(os.path.dirname(os.path.abspath(metalrt._metalrt.__file__)),
                       metalrt.metal_library_info(), not metalrt.device_info("metal")["simulated"])
    print("wheel smoke test: ok")


if __name__ == "__main__":
    main()
