"""metalrt.doctor() and `metalrt doctor`: every value checked against what it reports
(the package version, the device's own description, the C++ compiler on PATH, the
environment), and compile_shader's error when there is no C++ compiler."""
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys

import pytest

import metalrt

KEYS = ("metalrt", "python", "platform", "models_run_on", "models_run_on_why", "metal_device",
        "metal_device_kind", "metal_selection", "gpu_family", "unified_memory",
        "max_threadgroup_memory_bytes", "max_threads_per_threadgroup", "simd_width",
        "kernel_library", "metal_prefill_attention", "cpu_threads", "cpu_features", "cpu_gemv_isa",
        "cpu_prefill_gemm",
        "cpu_bf16_gemm_kernel",
        "cxx_compiler", "cache_dir")


def run_doctor(*args, **env):
    script = shutil.which("metalrt")
    assert script, "the metalrt console script is not installed"
    return subprocess.run([script, "doctor", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_the_report_describes_this_machine():
    report = metalrt.doctor()
    assert tuple(report) == KEYS
    assert report["metalrt"] == importlib.metadata.version("metalrt")
    assert report["python"].endswith(f"({sys.executable})")
    assert report["cpu_threads"] >= 1
    compiler = shutil.which(os.environ.get("CXX") or "c++")
    if compiler is None:
        assert report["cxx_compiler"] is None
    else:
        assert report["cxx_compiler"].startswith(f"{compiler} (")
    if not metalrt.is_available("metal"):
        assert report["metal_device"] is None and report["models_run_on"] == "cpu"
        return
    info = metalrt.device_info("metal")
    assert report["metal_device"] == info["name"]
    assert report["gpu_family"] == info["capability"]
    assert report["unified_memory"] is info["unified_memory"]
    assert report["max_threadgroup_memory_bytes"] == 32 * 1024   # every Apple-silicon GPU
    assert report["max_threads_per_threadgroup"] == 1024
    assert report["simd_width"] == 32
    library = metalrt.metal_library_info()
    assert report["metal_selection"] == library["selection"] and report["kernel_library"] == library["library"]
    if info["simulated"]:
        # The sim implements the lane layout the prefill kernel assumes.
        assert report["metal_prefill_attention"] == "native kernel"
        assert report["metal_device_kind"] == "simulated"
        assert report["models_run_on"] == "cpu"
        assert report["kernel_library"].startswith("the simulated device's kernels, compiled into")
    else:
        assert report["metal_device_kind"] == "Apple GPU" and report["models_run_on"] == "metal"


def test_the_environment_is_reported(tmp_path):
    code = "import json, metalrt; print(json.dumps(metalrt.doctor()))"
    env = {**os.environ, "METALRT_CPU_THREADS": "3", "METALRT_CACHE_DIR": str(tmp_path),
           "METALRT_METAL": "sim"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["cpu_threads"] == 3
    assert report["cpu_gemv_isa"] in ("avx512_vnni", "avx2", "neon", "portable")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**env, "METALRT_CPU_ISA": "portable"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cpu_gemv_isa"] == "portable"
    # Unset is auto where the CPU has AVX-512 BF16 (bf16 for quantized and bf16 weights), else f32.
    assert report["cpu_prefill_gemm"] in ("auto", "f32")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**env, "METALRT_CPU_GEMM": "f32"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cpu_prefill_gemm"] == "f32"
    # The bf16 GEMM's kernel: AMX by default where the CPU has it; METALRT_CPU_AMX=off
    # keeps AVX-512 BF16; no kernel without AVX-512 BF16.
    if report["cpu_prefill_gemm"] == "auto":
        assert report["cpu_bf16_gemm_kernel"] in ("amx_bf16", "avx512_bf16")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                              env={**env, "METALRT_CPU_AMX": "off"})
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["cpu_bf16_gemm_kernel"] == "avx512_bf16"
    else:
        assert report["cpu_bf16_gemm_kernel"] is None
    assert report["cache_dir"] == str(tmp_path)
    if metalrt.is_available("metal"):
        assert report["metal_selection"] == "sim (METALRT_METAL=sim)"
        assert report["metal_device_kind"] == "simulated"


def test_the_command_prints_a_table_and_json():
    table = run_doctor()
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split("|")[1].strip() == "check"
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in lines[2:]}
    assert tuple(rows) == KEYS
    assert rows["metalrt"] == importlib.metadata.version("metalrt")
    as_json = run_doctor("--json")
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    assert tuple(report) == KEYS
    assert {k: str(v) for k, v in report.items() if v is not None} == {k: v for k, v in rows.items() if v != "none"}


def test_a_bad_setting_is_a_one_line_error():
    proc = run_doctor(METALRT_CPU_THREADS="many")
    assert proc.returncode == 1
    assert proc.stderr == "metalrt: error: METALRT_CPU_THREADS must be an integer in [1, 1024], got 'many'\n"
    # The GEMV's ISA was only checked at the first quantized matmul: a doctor run (and a
    # float model) never saw a bad value.
    proc = run_doctor(METALRT_CPU_ISA="fastest")
    assert proc.returncode == 1
    assert proc.stderr == ("metalrt: error: METALRT_CPU_ISA must be one of portable, avx2, "
                           "avx512_vnni, neon, got 'fastest'\n")
    proc = run_doctor(METALRT_CPU_GEMM="fp8")
    assert proc.returncode == 1
    assert proc.stderr == "metalrt: error: METALRT_CPU_GEMM must be f32, bf16 or auto, got 'fp8'\n"
    # Read where a bf16 GEMM exists to run it (a CPU with AVX-512 BF16).
    if metalrt.doctor()["cpu_bf16_gemm_kernel"] is not None:
        proc = run_doctor(METALRT_CPU_AMX="yes")
        assert proc.returncode == 1
        assert proc.stderr == "metalrt: error: METALRT_CPU_AMX must be on, off or auto, got 'yes'\n"



def test_an_isa_of_another_cpu_names_the_ones_available():
    """METALRT_CPU_ISA=neon on x86 used to say it "asks for more than this CPU supports
    (best: avx512_vnni)"; the error now lists what this CPU and build can run."""
    best = metalrt.doctor()["cpu_gemv_isa"]   # METALRT_CPU_ISA is unset in the tests
    x86 = ["portable", "avx2", "avx512_vnni"]
    foreign, available = (("avx2", ["portable", "neon"]) if best == "neon"
                          else ("neon", x86[:x86.index(best) + 1]))
    proc = run_doctor(METALRT_CPU_ISA=foreign)
    assert proc.returncode == 1
    assert proc.stderr == (f"metalrt: error: METALRT_CPU_ISA={foreign} is not available: this CPU "
                           f"and build support {', '.join(available)}\n")

@pytest.mark.skipif(not metalrt.is_available("metal") or not metalrt.device_info("metal")["simulated"],
                    reason="the simulated device needs a C++ compiler; an Apple GPU does not")
def test_compile_shader_without_a_cxx_compiler_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))   # a directory with no compiler in it
    monkeypatch.delenv("CXX", raising=False)
    assert metalrt.doctor()["cxx_compiler"] is None
    with pytest.raises(RuntimeError, match=r"^\[compile_shader\] the simulated Metal device builds kernels "
                                           r"with a C\+\+17 compiler and none was found .*apt-get install g\+\+"):
        metalrt.compile_shader("kernel void f(device float* x [[buffer(0)]]) { x[0] = 1.0f; }")
    monkeypatch.setenv("CXX", "ccache-that-is-not-there g++")
    with pytest.raises(RuntimeError, match=r"none was found"):
        metalrt.compile_shader("kernel void f(device float* x [[buffer(0)]]) { x[0] = 2.0f; }")
