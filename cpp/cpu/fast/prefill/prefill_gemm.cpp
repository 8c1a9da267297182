#include "cpu/fast/prefill/prefill_gemm.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "cpu/fast/simd/cpu_features.h"

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
  const std::string name = env == nullptr ? "" : env;
  // Unset is auto: bf16 where it is no coarser than the weight itself, on CPUs that have it.
  if (name.empty() || name == "auto") return has_bf16 ? PrefillGemm::kAuto : PrefillGemm::kF32;
  if (name == "f32") return PrefillGemm::kF32;
  if (name != "bf16") throw std::invalid_argument("METALRT_CPU_GEMM must be f32, bf16 or auto, got '" + name + "'");
  if (!has_bf16) throw std::invalid_argument("METALRT_CPU_GEMM=bf16 needs a CPU with AVX-512 BF16 (and an OS "
                                             "that saves its registers); this one has none");
  return PrefillGemm::kBf16;
}

bool PrefillGemmIsBf16(bool coarse_weight) {
  const PrefillGemm gemm = SelectedPrefillGemm();
  return gemm == PrefillGemm::kBf16 || (gemm == PrefillGemm::kAuto && coarse_weight);
}

const char* Bf16KernelName(Bf16Kernel kernel) {
  return kernel == Bf16Kernel::kAmxBf16 ? "amx_bf16" : "avx512_bf16";
}

Bf16Kernel SelectedBf16Kernel() {
  const bool has_amx = CpuHasAmxBf16();
  const char* env = std::getenv("METALRT_CPU_AMX");
  const std::string name = env == nullptr ? "" : env;
  if (name.empty() || name == "auto") return has_amx ? Bf16Kernel::kAmxBf16 : Bf16Kernel::kAvx512Bf16;
  if (name == "off") return Bf16Kernel::kAvx512Bf16;
  if (name != "on") throw std::invalid_argument("METALRT_CPU_AMX must be on, off or auto, got '" + name + "'");
  if (!has_amx) throw std::invalid_argument("METALRT_CPU_AMX=on needs a CPU with AMX-BF16 (and an OS that grants its "
                                            "tile state); this one has none");
  return Bf16Kernel::kAmxBf16;
}

}  // namespace metalrt::cpu::fast
