// The CPU backend: host memory, synchronous execution.
#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "metalrt/device.h"

namespace metalrt {
namespace {

class CpuBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::kCPU; }
  std::string name() const override { return "CPU"; }
  void* Alloc(size_t bytes) override {
    // Round up to the alignment (aligned_alloc's contract); 0 bytes still gets a block.
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded >= kHugePage) return AllocHuge(rounded);
    void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void Free(void* ptr) override { std::free(ptr); }
  void Copy(void* dst, const void* src, size_t bytes, CopyKind) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void Memset(void* dst, int value, size_t bytes) override {
    if (bytes) std::memset(dst, value, bytes);
  }
  void Synchronize() override {}
  bool UnifiedMemory() const override { return true; }
  std::string Capability() const override { return "cpu"; }
  std::vector<DType> SupportedDTypes() const override {
    return {DType::kF32, DType::kBF16, DType::kF16};
  }

 private:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kHugePage = size_t{2} << 20;

  // An allocation of a huge page or more starts on a huge-page boundary and, on Linux,
  // asks for transparent huge pages (MADV_HUGEPAGE: the default "madvise" mode gives
  // them only when asked). A decode step's attention reads each layer's KV cache a few
  // KB at a time, after the weights have streamed through the caches: in 4 KB pages
  // every page was a TLB miss (and a stop of the hardware prefetchers), and the
  // attention of the default model ran ~16% slower (docs/cpu.md). The advice is a
  // hint: where it is refused the memory is the same, in small pages.
  static void* AllocHuge(size_t bytes) {
    void* p = nullptr;
    if (posix_memalign(&p, kHugePage, bytes) != 0) throw std::bad_alloc();
#if defined(__linux__)
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
  }
};

std::unique_ptr<Backend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

struct Registration {
  Registration() { RegisterBackend(DeviceType::kCPU, &MakeCpuBackend); }
} registration;

}  // namespace
}  // namespace metalrt
