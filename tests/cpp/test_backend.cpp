// Core gates of the CPU backend: the allocation and copy contract every backend keeps.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <stdexcept>
#include <vector>

#include "metalrt/device.h"

using namespace metalrt;

TEST_CASE("cpu backend: identity, unified memory, dtypes, devices by name") {
  CHECK(HasBackend(DeviceType::kCPU));
  Backend& cpu = GetBackend(DeviceType::kCPU);
  CHECK(&cpu == &GetBackend(DeviceType::kCPU));   // one instance
  CHECK(cpu.type() == DeviceType::kCPU);
  CHECK(cpu.name() == "CPU");
  CHECK(cpu.UnifiedMemory());
  CHECK(cpu.Capability() == "cpu");
  const std::vector<DType> dtypes = cpu.SupportedDTypes();
  CHECK(std::find(dtypes.begin(), dtypes.end(), DType::kF32) != dtypes.end());
  CHECK(DeviceTypeFromName("cpu") == DeviceType::kCPU);
  CHECK(DeviceTypeFromName("metal") == DeviceType::kMETAL);
  CHECK(std::string(DeviceTypeName(DeviceType::kMETAL)) == "metal");
  CHECK_THROWS_AS(DeviceTypeFromName("gpu"), std::invalid_argument);
}

TEST_CASE("cpu backend: Alloc is 64-byte aligned and distinct, Alloc(0) is a real block") {
  Backend& cpu = GetBackend(DeviceType::kCPU);
  std::vector<void*> blocks;
  std::set<void*> distinct;
  for (size_t bytes : {0, 0, 1, 3, 63, 64, 65, 1000, 1 << 20}) {
    void* p = cpu.Alloc(bytes);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
    std::memset(p, 0xA5, bytes);   // the whole size is writable
    blocks.push_back(p);
    distinct.insert(p);
  }
  CHECK(distinct.size() == blocks.size());
  for (void* p : blocks) cpu.Free(p);
  cpu.Free(nullptr);   // a no-op
}

TEST_CASE("cpu backend: Copy and Memset are byte-exact and stay inside their ranges") {
  Backend& cpu = GetBackend(DeviceType::kCPU);
  const size_t n = 257;
  auto* src = static_cast<uint8_t*>(cpu.Alloc(n));
  auto* dst = static_cast<uint8_t*>(cpu.Alloc(n));
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 31 + 7), dst[i] = 0xEE;
  for (CopyKind kind : {CopyKind::kHostToDevice, CopyKind::kDeviceToHost, CopyKind::kDeviceToDevice}) {
    std::memset(dst, 0xEE, n);
    cpu.Copy(dst + 1, src + 3, 200, kind);
    CHECK(std::memcmp(dst + 1, src + 3, 200) == 0);
    CHECK(dst[0] == 0xEE);     // guard bytes around the range are untouched
    CHECK(dst[201] == 0xEE);
  }
  cpu.Copy(dst, src, 0, CopyKind::kDeviceToDevice);   // zero bytes: nothing happens
  CHECK(dst[0] == 0xEE);
  cpu.Memset(dst + 5, 0x1FF, 100);   // the value's low byte, like memset
  CHECK(dst[4] != 0xFF);
  CHECK(std::all_of(dst + 5, dst + 105, [](uint8_t b) { return b == 0xFF; }));
  CHECK(dst[105] != 0xFF);
  cpu.Synchronize();
  cpu.Free(src);
  cpu.Free(dst);
}

TEST_CASE("cpu backend: queues exist, graph capture is unsupported and says so") {
  Backend& cpu = GetBackend(DeviceType::kCPU);
  std::unique_ptr<Queue> q = cpu.CreateQueue();
  CHECK(q != nullptr);
  cpu.DestroyQueue(std::move(q));
  CHECK(!cpu.SupportsGraphCapture());
  CHECK_THROWS_AS(cpu.BeginCapture(), std::runtime_error);
  CHECK_THROWS_AS(cpu.EndCapture(), std::runtime_error);
}
