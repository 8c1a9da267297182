// Which SIMD kernels this CPU can run, checked once at run time: the binary carries a
// kernel per instruction set (gemv_<isa>.cpp, each compiled with its own target
// flags) and must never execute an instruction the CPU or the OS does not enable.
#pragma once

namespace metalrt::cpu::fast {

enum class GemvIsa { kPortable, kAvx2, kAvx512Vnni, kNeon };

// "portable", "avx2", "avx512_vnni", "neon".
const char* GemvIsaName(GemvIsa isa);

// The best kernel the CPU supports: on x86, AVX-512 (F, BW, VL, VNNI) only when the
// OS saves the ZMM and opmask state (XCR0 via xgetbv: some VMs advertise the CPUID
// bits without enabling it), else AVX2 + FMA + F16C when the OS saves YMM state;
// NEON on arm64; portable C++ otherwise. METALRT_CPU_ISA=portable|avx2|avx512_vnni
// lowers the choice (for tests and benchmarks); asking for more than the CPU has,
// or an unknown name, is std::invalid_argument. The environment is read at the first
// call and the choice kept (a decode step asks a few hundred times); a bad value is
// thrown on every call and never kept.
GemvIsa SelectedGemvIsa();

// Forgets the kept METALRT_CPU_ISA choice, so the next call reads the environment
// again: for tests that change it in-process.
void ResetCpuSelections();

// True when the CPU has AVX-512 F/BW/VL and BF16 (vdpbf16ps) and the OS saves the ZMM
// and opmask state: the bf16 prefill GEMM (gemm_bf16.h) may run.
bool CpuHasAvx512Bf16();

// True when the CPU runs the avx512_vnni kernels and has AVX512_VBMI (vpermb): the
// AVX-512 m = 1 MXFP4 GEMV (gemv_avx512_vnni.cpp) may run.
bool CpuHasAvx512Vbmi();

// True when CpuHasAvx512Bf16() and the CPU has AMX (tiles and TDPBF16PS), the OS saves
// the tile state (XCR0 bits 17-18) and, on Linux, granted this process the tile data
// (arch_prctl ARCH_REQ_XCOMP_PERM, asked once here: without it the first tile
// instruction faults): the bf16 GEMM's AMX kernel (gemm_bf16_amx.cpp) may run.
bool CpuHasAmxBf16();

}  // namespace metalrt::cpu::fast
