// The CPU kernel sets a test can select through METALRT_CPU_ISA on this machine.
#pragma once
#include <vector>

#include "cpu/fast/simd/cpu_features.h"

namespace metalrt::testing {

// Every kernel set this CPU can run, the portable one first, then AVX2 under AVX-512,
// then the best.
inline std::vector<cpu::fast::GemvIsa> RunnableIsas() {
  using cpu::fast::GemvIsa;
  const GemvIsa best = cpu::fast::SelectedGemvIsa();
  std::vector<GemvIsa> isas{GemvIsa::kPortable};
  if (best == GemvIsa::kAvx512Vnni) isas.push_back(GemvIsa::kAvx2);
  if (best != GemvIsa::kPortable) isas.push_back(best);
  return isas;
}

}  // namespace metalrt::testing
