#include "cpu/fast/prefill_gemm.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "cpu/fast/cpu_features.h"

namespace metalrt::cpu::fast {

const char* PrefillGemmName(PrefillGemm gemm) {
  switch (gemm) {
    case PrefillGemm::kBf16: return "bf16";
    case PrefillGemm::kAuto: return "auto";
    case PrefillGemm::kF32: break;
  }
  return "f32";
}

PrefillGemm SelectedPrefillGemm() {
  const bool has_bf16 = CpuHasAvx512Bf16();
  const char* env = std::getenv("METALRT_CPU_GEMM");
  // Unset is f32: bf16 moved the MoE models' prefill logits past their 1e-3 gate and a
  // batched server stream off its solo tokens (not yet understood), so bf16 is opt-in.
  if (env == nullptr || *env == '\0') return PrefillGemm::kF32;
  const std::string name = env;
  if (name == "f32") return PrefillGemm::kF32;
  if (name != "bf16" && name != "auto")
    throw std::invalid_argument("METALRT_CPU_GEMM must be f32, bf16 or auto, got '" + name + "'");
  if (!has_bf16) throw std::invalid_argument("METALRT_CPU_GEMM=" + name + " needs a CPU with AVX-512 BF16 (and an OS "
                                             "that saves its registers); this one has none");
  return name == "auto" ? PrefillGemm::kAuto : PrefillGemm::kBf16;
}

bool PrefillGemmIsBf16(bool coarse_weight) {
  const PrefillGemm gemm = SelectedPrefillGemm();
  return gemm == PrefillGemm::kBf16 || (gemm == PrefillGemm::kAuto && coarse_weight);
}

}  // namespace metalrt::cpu::fast
