// The CPU backend: host memory, synchronous execution.
#include <cstdlib>
#include <cstring>
#include <new>

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
};

std::unique_ptr<Backend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

struct Registration {
  Registration() { RegisterBackend(DeviceType::kCPU, &MakeCpuBackend); }
} registration;

}  // namespace
}  // namespace metalrt
