// Op cases of the CPU's bf16 prefill products (the GEMM providers, the prefill
// attention) under a chosen METALRT_CPU_GEMM and bf16 kernel (METALRT_CPU_AMX).
#pragma once
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/fast/simd/cpu_features.h"
#include "cpu/fast/prefill/prefill_gemm.h"
#include "op_cases.h"

namespace metalrt::testing {

// The case's run with the environment variable `name` set to `value` (read by the fast
// providers only, so the oracle's run is the same either way).
inline void RunUnder(OpCase& c, const char* name, std::string value) {
  c.run = [run = c.run, name, value](const Inputs& in, const Outputs& out) {
    setenv(name, value.c_str(), 1);
    Returned returned = run(in, out);
    unsetenv(name);
    return returned;
  };
}

// The bf16 kernels this CPU runs: AVX-512 BF16, and AMX where it has the tiles.
inline std::vector<cpu::fast::Bf16Kernel> Bf16Kernels() {
  std::vector<cpu::fast::Bf16Kernel> kernels{cpu::fast::Bf16Kernel::kAvx512Bf16};
  if (cpu::fast::CpuHasAmxBf16()) kernels.push_back(cpu::fast::Bf16Kernel::kAmxBf16);
  return kernels;
}

inline const char* AmxSetting(cpu::fast::Bf16Kernel kernel) {
  return kernel == cpu::fast::Bf16Kernel::kAmxBf16 ? "on" : "off";
}

// A bf16 case run on `kernel` (METALRT_CPU_AMX), named after it.
inline OpCase OnKernel(OpCase c, cpu::fast::Bf16Kernel kernel) {
  c.name += std::string("/") + cpu::fast::Bf16KernelName(kernel);
  RunUnder(c, "METALRT_CPU_AMX", AmxSetting(kernel));
  return c;
}

}  // namespace metalrt::testing
