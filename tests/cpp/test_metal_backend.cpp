// The kMETAL backend as the rest of metalrt sees it: GetBackend(DeviceType::kMETAL).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <set>
#include <vector>

#include "metal_fixture.h"
#include "gpu/device_selection.h"
#include "metalrt/op_registry.h"

using namespace metalrt;

namespace {

Backend& Metal() { return GetBackend(DeviceType::kMETAL); }

// A test-only op with only a CPU provider: out = 2 * in (f32).
bool CpuTestDouble(const OpCall& call) {
  const Tensor& in = call.inputs[0];
  const Tensor& out = call.outputs[0];
  for (int64_t i = 0; i < in.numel(); ++i) out.data_as<float>()[i] = 2.0f * in.data_as<float>()[i];
  return true;
}
METALRT_REGISTER_PROVIDER("test_reference_tier_double", DeviceType::kCPU, "cpu_test_reference_tier_double", 0,
                          CpuTestDouble);

}  // namespace

TEST_CASE("metal backend: registered, unified memory, GPU family, bf16 first, no graph capture") {
  REQUIRE(HasBackend(DeviceType::kMETAL));
  Backend& b = Metal();
  CHECK(b.type() == DeviceType::kMETAL);
  const bool simulated = gpu::ActiveMetalBackend().device().is_simulated();
  const std::string name = b.name();
  CHECK((simulated ? name.find("simulated") != std::string::npos : name.rfind("Apple M", 0) == 0));
  CHECK(b.UnifiedMemory());
  CHECK(b.Capability() == gpu::ActiveMetalBackend().device().gpu_family());
  CHECK(b.Capability().rfind("apple", 0) == 0);
  REQUIRE_FALSE(b.SupportedDTypes().empty());
  CHECK(b.SupportedDTypes().front() == DType::kBF16);
  CHECK_FALSE(b.SupportsGraphCapture());
  CHECK_THROWS_AS(b.BeginCapture(), std::runtime_error);
}

TEST_CASE("metal backend: allocations are 64-byte aligned and distinct; Alloc(0), Free(nullptr)") {
  Backend& b = Metal();
  std::set<void*> seen;
  std::vector<void*> blocks;
  for (size_t bytes : {0, 0, 1, 31, 32, 33, 4095, 4096, 1 << 20}) {
    void* p = b.Alloc(bytes);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
    CHECK(seen.insert(p).second);
    blocks.push_back(p);
  }
  // Alloc(0) is a registered block: an empty view of it binds.
  auto r = gpu::ActiveMetalBackend().allocations().Resolve(blocks[0], 0, "test");
  CHECK(r.offset == 0);
  for (void* p : blocks) b.Free(p);
  CHECK_NOTHROW(b.Free(nullptr));
  CHECK_THROWS_WITH_AS(b.Free(blocks[2]), doctest::Contains("not the base of a live allocation"),
                       std::invalid_argument);
  std::vector<char> host(64);
  CHECK_THROWS_AS(b.Free(host.data()), std::invalid_argument);
  void* p = b.Alloc(128);
  CHECK_THROWS_AS(b.Free(static_cast<char*>(p) + 64), std::invalid_argument);
  b.Free(p);
}

TEST_CASE("metal backend: memset and copies are byte-exact and stay inside their ranges") {
  Backend& b = Metal();
  const size_t n = 1000;
  auto* dev = static_cast<uint8_t*>(b.Alloc(n));
  auto* dev2 = static_cast<uint8_t*>(b.Alloc(n));
  std::vector<uint8_t> pattern(n);
  for (size_t i = 0; i < n; ++i) pattern[i] = static_cast<uint8_t>((i * 131 + 7) % 251);

  b.Copy(dev, pattern.data(), n, CopyKind::kHostToDevice);
  b.Memset(dev + 3, 0xAB, 77);
  std::vector<uint8_t> host(n, 0x5A);
  b.Copy(host.data(), dev, n, CopyKind::kDeviceToHost);
  for (size_t i = 0; i < n; ++i) CHECK(host[i] == (i >= 3 && i < 80 ? 0xAB : pattern[i]));

  b.Memset(dev2, 0, n);
  b.Copy(dev2 + 101, dev + 5, 333, CopyKind::kDeviceToDevice);
  b.Copy(host.data(), dev2, n, CopyKind::kDeviceToHost);
  for (size_t i = 0; i < n; ++i) {
    const size_t src = i - 101 + 5;
    const uint8_t want = (i >= 101 && i < 434) ? (src >= 3 && src < 80 ? 0xAB : pattern[src]) : 0;
    CHECK(host[i] == want);
  }

  // The device side must be Metal memory, and the range must fit the allocation.
  std::vector<uint8_t> other(n);
  CHECK_THROWS_WITH_AS(b.Copy(other.data(), pattern.data(), n, CopyKind::kHostToDevice),
                       doctest::Contains("[metal copy] destination"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(b.Copy(other.data(), pattern.data(), n, CopyKind::kDeviceToHost),
                       doctest::Contains("[metal copy] source"), std::invalid_argument);
  CHECK_THROWS_AS(b.Copy(dev + 1, pattern.data(), n, CopyKind::kHostToDevice), std::invalid_argument);
  CHECK_THROWS_WITH_AS(b.Memset(other.data(), 0, 4), doctest::Contains("[metal memset] destination"),
                       std::invalid_argument);
  b.Free(dev);
  b.Free(dev2);
}

TEST_CASE("metal backend: device selection honours METALRT_METAL") {
  auto with_env = [](const char* value) {
    setenv("METALRT_METAL", value, 1);
    struct Unset {
      ~Unset() { unsetenv("METALRT_METAL"); }
    } unset;
    return gpu::SelectGpuDevice();
  };
  CHECK(with_env("sim")->is_simulated());
  CHECK_THROWS_WITH_AS(with_env("gpu"), "METALRT_METAL must be 'native' or 'sim', got 'gpu'",
                       std::invalid_argument);
#if defined(__APPLE__)
  CHECK_FALSE(with_env("native")->is_simulated());
#else
  CHECK_THROWS_WITH_AS(with_env("native"),
                       "METALRT_METAL=native but no usable Apple GPU: metalrt was built without the "
                       "Metal.framework device (not on macOS); use METALRT_METAL=sim",
                       std::runtime_error);
#endif
}

TEST_CASE("metal backend: an op with only a CPU provider is served by the reference tier") {
  const OpId op = "test_reference_tier_double";
  ResetProviderStats();
  CHECK_FALSE(OpRegistered(op, DeviceType::kMETAL));
  CHECK(OpRegistered(op, DeviceType::kCPU));
  Tensor x = Tensor::Empty({33}, DType::kF32, DeviceType::kMETAL);
  Tensor y = Tensor::Empty({33}, DType::kF32, DeviceType::kMETAL);
  std::vector<float> values(33);
  for (int i = 0; i < 33; ++i) values[i] = 0.25f * i - 4.0f;
  Metal().Copy(x.data(), values.data(), x.nbytes(), CopyKind::kHostToDevice);
  std::vector<float> nan(33, std::nanf(""));
  Metal().Copy(y.data(), nan.data(), y.nbytes(), CopyKind::kHostToDevice);
  // Pending GPU work on x (x = x + 1) must land before the CPU reads x.
  metalrt::testing::Affine(gpu::ActiveMetalBackend(), x, x, 1.0f, 1.0f);
  OpCall call;
  call.inputs = {x};
  call.outputs = {y};
  RunOp(op, DeviceType::kMETAL, call);
  std::vector<float> got(33);
  Metal().Copy(got.data(), y.data(), y.nbytes(), CopyKind::kDeviceToHost);
  for (int i = 0; i < 33; ++i) CHECK(got[i] == 2.0f * (values[i] + 1.0f));
  ProviderStats s = GetProviderStats(op, DeviceType::kMETAL);
  CHECK(s.last_selected == "reference:cpu_test_reference_tier_double");
  CHECK(s.calls == 1);
  CHECK(s.reference_hits == 1);
  CHECK(s.declines == 0);
}
