"""``metalrt doctor``: what metalrt finds on this machine, as a dict and as a short
table to paste into an issue."""
from __future__ import annotations

import platform
import subprocess
import sys
from typing import Any

from . import _metalrt
from .default_model import cache_dir
from .generation import resolve_device
from .shader import cxx_compiler
from .version import package_version


def _metal_facts() -> dict[str, Any]:
    if not _metalrt.is_available("metal"):
        return {"metal_device": None, "metal_selection": "no Metal device in this build"}
    info = _metalrt.device_info("metal")
    library = _metalrt.metal_library_info()   # loads the kernels first
    facts = _metalrt._metal_device_facts()
    return {
        "metal_device": info["name"],
        "metal_device_kind": "simulated" if info["simulated"] else "Apple GPU",
        "metal_selection": library["selection"],
        "gpu_family": info["capability"],
        "unified_memory": info["unified_memory"],
        "max_threadgroup_memory_bytes": facts["max_threadgroup_memory_bytes"],
        "max_threads_per_threadgroup": facts["max_threads_per_threadgroup"],
        "simd_width": facts["simd_width"],
        "kernel_library": library["library"],
        "metal_prefill_attention": (f"reference tier: {facts['prefill_attention_decline']}"
                                    if facts["prefill_attention_decline"] else "native kernel"),
    }


def _compiler_version(path: str) -> str:
    """The first line ``<compiler> --version`` prints ("" when it prints nothing)."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot run: {e}"
    lines = (out.stdout or out.stderr).splitlines()
    return lines[0] if lines else ""


def doctor() -> dict[str, Any]:
    """What metalrt finds on this machine.

    Returns a dict of plain values: ``metalrt`` (version), ``python``, ``platform``,
    ``models_run_on`` ("metal" or "cpu", where ``metalrt.load`` puts a model by
    default) and ``models_run_on_why``; for the Metal device (None values when there
    is none): ``metal_device`` (name), ``metal_device_kind`` ("Apple GPU" or
    "simulated"), ``metal_selection`` (why that device, as
    ``metalrt.metal_library_info()`` says), ``gpu_family`` (e.g. "apple9"),
    ``unified_memory``, ``max_threadgroup_memory_bytes``,
    ``max_threads_per_threadgroup``, ``simd_width``, ``kernel_library`` (the
    metallib's path, or how the kernels were compiled and in how many seconds) and
    ``metal_prefill_attention`` ("native kernel", or "reference tier: <why>" where the
    device's simdgroup_matrix lane layout, probed once, differs from the one the
    prefill attention kernel assumes);
    ``cpu_threads``, ``cpu_features`` (the SIMD extensions the CPU
    kernels were compiled for) and ``cpu_gemv_isa`` (the SIMD kernels the fast quantized
    GEMV chose at run time: avx512_vnni, avx2, neon or portable, after
    ``METALRT_CPU_ISA``) and ``cpu_prefill_gemm`` (the prefill GEMM's arithmetic, after
    ``METALRT_CPU_GEMM``: by default "auto" where the CPU has AVX-512 BF16 (bf16 for
    quantized and bf16 weights, f32 for f32 and f16 weights), else "f32"; "f32" or
    "bf16", every weight, when set) and ``cpu_bf16_gemm_kernel`` (the bf16 GEMM's
    kernel, after ``METALRT_CPU_AMX``: "amx_bf16" by default where the CPU has AMX tiles
    and the OS grants them, else "avx512_bf16"; None on a CPU without AVX-512 BF16);
    ``cxx_compiler`` (what ``compile_shader`` builds
    kernels with on the simulated device: its path and version, or None) and
    ``cache_dir`` (downloaded models, and compiled kernels under ``kernels/``).

    Loads the Metal device's kernels (on a Mac without a metallib that compiles them).
    Raises ValueError when an environment setting (METALRT_METAL, METALRT_SIM_*,
    METALRT_CPU_THREADS, METALRT_CPU_ISA, METALRT_CPU_GEMM, METALRT_CPU_AMX) is malformed; RuntimeError when the Metal device fails to
    load its kernels.
    """
    report: dict[str, Any] = {
        "metalrt": package_version(),
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": f"{platform.platform()} {platform.machine()}",
    }
    metal = _metal_facts()
    runs_on = resolve_device("auto")
    report["models_run_on"] = runs_on
    report["models_run_on_why"] = (
        "an Apple GPU" if runs_on == "metal" else
        "the simulated Metal device is for testing kernels, not for speed"
        if metal["metal_device"] else "no Metal device")
    report.update({key: metal.get(key) for key in (
        "metal_device", "metal_device_kind", "metal_selection", "gpu_family", "unified_memory",
        "max_threadgroup_memory_bytes", "max_threads_per_threadgroup", "simd_width",
        "kernel_library", "metal_prefill_attention")})
    cpu = _metalrt._cpu_facts()
    report["cpu_threads"] = cpu["threads"]
    report["cpu_features"] = ", ".join(cpu["compiled_features"]) or "baseline only"
    report["cpu_gemv_isa"] = cpu["gemv_isa"]
    report["cpu_prefill_gemm"] = cpu["prefill_gemm"]
    report["cpu_bf16_gemm_kernel"] = cpu["bf16_gemm_kernel"]
    compiler = cxx_compiler()
    report["cxx_compiler"] = f"{compiler} ({_compiler_version(compiler)})" if compiler else None
    report["cache_dir"] = str(cache_dir())
    return report


def format_report(report: dict[str, Any]) -> str:
    """``report`` (from :func:`doctor`) as a two-column Markdown table; a missing value
    reads "none"."""
    width = max(len(key) for key in report)
    rows = [f"| {'check':<{width}} | value |", f"|{'-' * (width + 2)}|-------|"]
    rows += [f"| {key:<{width}} | {'none' if value is None else value} |" for key, value in report.items()]
    return "\n".join(rows)
