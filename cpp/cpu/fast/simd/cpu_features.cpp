#include "cpu/fast/simd/cpu_features.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace metalrt::cpu::fast {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// XCR0 bits the OS sets when it saves a register state on context switch: SSE (1),
// AVX's upper YMM halves (2), AVX-512's opmask (5), upper ZMM halves (6) and ZMM16-31 (7).
uint64_t Xcr0() {
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(1), "c"(0));
  if (!(ecx & (1u << 27))) return 0;   // OSXSAVE: xgetbv itself would fault
  uint32_t lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

GemvIsa Detect() {
  const uint64_t xcr0 = Xcr0();
  const bool ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xE6) == 0xE6;
  if (zmm && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
    return GemvIsa::kAvx512Vnni;
  if (ymm && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    return GemvIsa::kAvx2;
  return GemvIsa::kPortable;
}

bool DetectAvx512Vbmi() { return Detect() == GemvIsa::kAvx512Vnni && __builtin_cpu_supports("avx512vbmi"); }

bool DetectAvx512Bf16() {
  return (Xcr0() & 0xE6) == 0xE6 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}

// CPUID leaf 7's EDX bits for AMX-BF16 (22) and AMX-TILE (24); XCR0's XTILECFG (17) and
// XTILEDATA (18).
bool DetectAmxBf16() {
  if (!DetectAvx512Bf16() || (Xcr0() & 0x60000) != 0x60000) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(0), "c"(0));
  if (eax < 7) return false;
  __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(7), "c"(0));
  if (!(edx & (1u << 22)) || !(edx & (1u << 24))) return false;
#if defined(__linux__) && defined(__x86_64__)
  // Linux hands out the 8 KB tile state per process on request (kernel 5.16+):
  // ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18). A kernel that refuses,
  // or predates it, leaves the tiles off.
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;   // other x86 systems: no known way to ask for the tile state
#endif
}
#elif defined(__aarch64__)
GemvIsa Detect() { return GemvIsa::kNeon; }   // NEON is part of the arm64 baseline
#else
GemvIsa Detect() { return GemvIsa::kPortable; }
#endif
#if !defined(__x86_64__) && !defined(__i386__)
bool DetectAvx512Vbmi() { return false; }
bool DetectAvx512Bf16() { return false; }
bool DetectAmxBf16() { return false; }
#endif

// The ISAs in increasing order of what they need; an override may only go down it.
int Rank(GemvIsa isa) { return isa == GemvIsa::kPortable ? 0 : isa == GemvIsa::kAvx2 ? 1 : 2; }

// What an override may name given the best ISA: portable, then the best one's family
// up to it ("portable, avx2" on an AVX2 CPU; a NEON name on x86 is never in it).
std::string Available(GemvIsa best) {
  if (best == GemvIsa::kNeon) return "portable, neon";
  std::string names = GemvIsaName(GemvIsa::kPortable);
  for (GemvIsa isa : {GemvIsa::kAvx2, GemvIsa::kAvx512Vnni})
    if (Rank(isa) <= Rank(best)) names += std::string(", ") + GemvIsaName(isa);
  return names;
}

GemvIsa FromEnv(GemvIsa best) {
  const char* env = std::getenv("METALRT_CPU_ISA");
  if (env == nullptr || *env == '\0') return best;
  const std::string name = env;
  for (GemvIsa isa : {GemvIsa::kPortable, GemvIsa::kAvx2, GemvIsa::kAvx512Vnni, GemvIsa::kNeon}) {
    if (name != GemvIsaName(isa)) continue;
    const bool same_family = isa == GemvIsa::kPortable || (isa == GemvIsa::kNeon) == (best == GemvIsa::kNeon);
    if (same_family && Rank(isa) <= Rank(best)) return isa;
    throw std::invalid_argument("METALRT_CPU_ISA=" + name + " is not available: this CPU and build support " +
                                Available(best));
  }
  throw std::invalid_argument("METALRT_CPU_ISA must be one of portable, avx2, avx512_vnni, neon, got '" + name + "'");
}

}  // namespace

const char* GemvIsaName(GemvIsa isa) {
  switch (isa) {
    case GemvIsa::kAvx2: return "avx2";
    case GemvIsa::kAvx512Vnni: return "avx512_vnni";
    case GemvIsa::kNeon: return "neon";
    case GemvIsa::kPortable: break;
  }
  return "portable";
}

bool CpuHasAvx512Vbmi() {
  static const bool has = DetectAvx512Vbmi();
  return has;
}

bool CpuHasAvx512Bf16() {
  static const bool has = DetectAvx512Bf16();
  return has;
}

bool CpuHasAmxBf16() {
  static const bool has = DetectAmxBf16();
  return has;
}

namespace {
std::atomic<int> kept_isa{-1};   // a GemvIsa once read from the environment, else -1
}  // namespace

GemvIsa SelectedGemvIsa() {
  static const GemvIsa best = Detect();
  const int kept = kept_isa.load(std::memory_order_relaxed);
  if (kept >= 0) return static_cast<GemvIsa>(kept);
  const GemvIsa isa = FromEnv(best);   // throws on a bad value: nothing kept
  kept_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
  return isa;
}

void ResetCpuSelections() { kept_isa.store(-1, std::memory_order_relaxed); }

}  // namespace metalrt::cpu::fast
