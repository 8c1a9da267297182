// The declarative dispatch API: names, bindings at the view's byte offset, and the
// checks that turn a wrong launch into an "[<kernel>] ..." exception.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "metal_fixture.h"

using namespace metalrt;
using gpu::KernelLaunch;
using gpu::KernelName;
using metalrt::testing::Affine;
using metalrt::testing::FakeDispatch;
using metalrt::testing::FakeMetal;
using metalrt::testing::MetalFixture;

TEST_CASE("kernel names: <op>_<variant>_<dtype>") {
  CHECK(KernelName("rms_norm", "row", DType::kF32) == "rms_norm_row_f32");
  CHECK(KernelName("matmul_bt", "gemv", DType::kBF16) == "matmul_bt_gemv_bf16");
  CHECK(KernelName("add", "", DType::kF16) == "add_f16");
  CHECK(KernelName("embedding", "gather", DType::kI64) == "embedding_gather_i64");
  CHECK(std::string(gpu::KernelDTypeSuffix(DType::kU8)) == "u8");
  CHECK(std::string(gpu::KernelDTypeSuffix(DType::kI8)) == "i8");
  CHECK(std::string(gpu::KernelDTypeSuffix(DType::kI32)) == "i32");
  CHECK(std::string(gpu::KernelDTypeSuffix(DType::kU32)) == "u32");
}

TEST_CASE("an op on rows [1, 3) of a 4-row allocation changes only those rows") {
  MetalFixture m;
  Tensor all = m.Floats({4, 33});
  std::vector<float> init(4 * 33);
  for (int i = 0; i < 4 * 33; ++i) init[i] = static_cast<float>(i);
  m.Write(all, init);
  Tensor rows = all.Slice(0, 1, 3);
  Affine(*m, rows, rows, -1.0f, 0.5f);
  std::vector<float> got = m.Read(all);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 33; ++c) {
      const float before = init[r * 33 + c];
      CHECK(got[r * 33 + c] == ((r == 1 || r == 2) ? -before + 0.5f : before));
    }
}

TEST_CASE("bindings: buffer offsets, bytes, threadgroup memory, constants and the grid reach the device") {
  FakeMetal m;
  FakeDispatch seen;
  m.device->library.add("probe", [&](const FakeDispatch& d) { seen = d; });
  Tensor a = m.Floats({8, 4});
  struct Args {
    int32_t rows;
    float eps;
  };
  KernelLaunch(*m, "probe", {gpu::Constant(0, true), gpu::Constant(1, int32_t{-7}),
                                     gpu::Constant(2, uint32_t{9}), gpu::Constant(3, 0.5f)})
      .input(0, a.Slice(0, 3, 8))
      .output(1, a)
      .bytes(2, Args{5, 1e-5f})
      .threadgroup_memory(0, 1024)
      .threadgroups({3, 2, 1}, {64, 2, 1});
  m->Synchronize();
  CHECK(seen.kernel == "probe");
  CHECK(seen.buffers.at(0) == static_cast<char*>(a.data()) + 3 * 4 * 4);
  CHECK(seen.buffers.at(1) == static_cast<char*>(a.data()));
  CHECK(seen.arg<Args>(2).rows == 5);
  CHECK(seen.arg<Args>(2).eps == 1e-5f);
  CHECK(seen.threadgroup_memory.at(0) == 1024);
  CHECK_FALSE(seen.per_thread);
  CHECK((seen.grid.x == 3 && seen.grid.y == 2 && seen.grid.z == 1));
  CHECK((seen.group.x == 64 && seen.group.y == 2 && seen.group.z == 1));
  REQUIRE(seen.constants.size() == 4);
  CHECK(seen.constants[0].type == gpu::FunctionConstant::Type::kBool);
  CHECK(seen.constants[0].bytes[0] == 1);
  int32_t i32;
  std::memcpy(&i32, seen.constants[1].bytes.data(), 4);
  CHECK(i32 == -7);
  CHECK(seen.constants[2].type == gpu::FunctionConstant::Type::kUInt32);
  CHECK(seen.constants[2].bytes[0] == 9);
  float f32;
  std::memcpy(&f32, seen.constants[3].bytes.data(), 4);
  CHECK(f32 == 0.5f);
  CHECK(seen.constants[3].index == 3);
}

TEST_CASE("bindings: threadgroup memory is rounded up to 16 bytes; an empty view binds at offset 0") {
  FakeMetal m;
  FakeDispatch seen;
  m.device->library.add("probe", [&](const FakeDispatch& d) { seen = d; });
  Tensor a = m.Floats({8, 4});
  KernelLaunch(*m, "probe")
      .input(0, a.Slice(0, 8, 8))   // empty, one past the end
      .input(1, a.Slice(0, 2, 2))   // empty, inside
      .threadgroup_memory(0, 1)
      .threadgroup_memory(1, 20)
      .threadgroup_memory(2, 32)
      .threadgroups({1, 1, 1}, {32, 1, 1});
  m->Synchronize();
  CHECK(seen.buffers.at(0) == static_cast<char*>(a.data()));
  CHECK(seen.buffers.at(1) == static_cast<char*>(a.data()));
  CHECK(seen.threadgroup_memory.at(0) == 16);
  CHECK(seen.threadgroup_memory.at(1) == 32);
  CHECK(seen.threadgroup_memory.at(2) == 32);
}

TEST_CASE("bindings: a kernel from another library") {
  FakeMetal m;
  metalrt::testing::FakeLibrary other;
  bool ran = false;
  other.add("only_here", [&](const FakeDispatch&) { ran = true; });
  CHECK_THROWS_AS(KernelLaunch(*m, "only_here").threads({1, 1, 1}, {1, 1, 1}), std::invalid_argument);
  KernelLaunch(*m, "only_here").library(other).threads({1, 1, 1}, {1, 1, 1});
  m->Synchronize();
  CHECK(ran);
}

TEST_CASE("bindings: tensors outside the Metal backend's memory are rejected, never read") {
  FakeMetal m;
  Tensor y = m.Floats({4});
  std::vector<float> host(4, 1.0f);
  Tensor host_on_metal = Tensor::FromBlob(host.data(), {4}, DType::kF32, DeviceType::kMETAL);
  CHECK_THROWS_WITH_AS(Affine(*m, host_on_metal, y, 1, 0),
                       doctest::Contains("[affine_f32] input at buffer 0: 16 bytes at"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(Affine(*m, host_on_metal, y, 1, 0),
                       doctest::Contains("not allocated by the Metal backend"), std::invalid_argument);
  Tensor cpu = Tensor::FromBlob(host.data(), {4}, DType::kF32, DeviceType::kCPU);
  CHECK_THROWS_WITH_AS(Affine(*m, y, cpu, 1, 0),
                       "[affine_f32] output at buffer 1 must be on the metal device, got float32[4] on cpu",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(Affine(*m, Tensor(), y, 1, 0),
                       "[affine_f32] input at buffer 0 is an undefined tensor", std::invalid_argument);
  // A freed block.
  void* p = m->Alloc(16);
  m->Free(p);
  Tensor freed = Tensor::FromBlob(p, {4}, DType::kF32, DeviceType::kMETAL);
  CHECK_THROWS_AS(Affine(*m, freed, y, 1, 0), std::invalid_argument);
  // A view reaching past its allocation.
  Tensor too_long = Tensor::FromBlob(y.data(), {5}, DType::kF32, DeviceType::kMETAL);
  CHECK_THROWS_AS(Affine(*m, too_long, y, 1, 0), std::invalid_argument);
  CHECK(m.device->counters.command_buffers == 0);   // nothing was encoded
}

TEST_CASE("launch checks: duplicate indices, oversized groups and threadgroup memory, bad bytes") {
  FakeMetal m;
  Tensor x = m.Floats({4});
  CHECK_THROWS_WITH_AS(KernelLaunch(*m, "affine_f32").input(0, x).output(0, x).threads({4, 1, 1}, {4, 1, 1}),
                       "[affine_f32] buffer index 0 is bound twice", std::invalid_argument);
  CHECK_THROWS_WITH_AS(KernelLaunch(*m, "affine_f32").threads({4, 1, 1}, {32, 32, 2}),
                       "[affine_f32] threads per threadgroup (32, 32, 2) = 2048 exceed the pipeline's "
                       "maxTotalThreadsPerThreadgroup of 1024",
                       std::invalid_argument);
  CHECK_THROWS_AS(KernelLaunch(*m, "affine_f32").threads({4, 1, 1}, {0, 1, 1}), std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      KernelLaunch(*m, "affine_f32").threadgroup_memory(0, 32768).threadgroup_memory(1, 4).threads({4, 1, 1}, {4, 1, 1}),
      "[affine_f32] 32784 bytes of threadgroup memory exceed the device's 32768", std::invalid_argument);
  CHECK_THROWS_WITH_AS(KernelLaunch(*m, "affine_f32").input(31, x),
                       "[affine_f32] buffer index 31 is out of range: Metal's buffer indices are 0..30",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(KernelLaunch(*m, "affine_f32").bytes(31, "x", 1),
                       "[affine_f32] buffer index 31 is out of range: Metal's buffer indices are 0..30",
                       std::invalid_argument);
  std::vector<uint8_t> big(4096);   // setBytes takes fewer than 4096 bytes
  CHECK_THROWS_WITH_AS(KernelLaunch(*m, "affine_f32").bytes(2, big.data(), big.size()),
                       "[affine_f32] bytes at buffer 2 must be 1..4095 bytes, got 4096", std::invalid_argument);
  CHECK_THROWS_AS(KernelLaunch(*m, "no_such_kernel").threads({1, 1, 1}, {1, 1, 1}), std::invalid_argument);
  CHECK(m.device->counters.command_buffers == 0);
}

TEST_CASE("launch: a grid with a zero extent encodes nothing") {
  FakeMetal m;
  Tensor x = m.Floats({4});
  Tensor empty = x.Slice(0, 4, 4);   // an empty view one past the end still binds
  KernelLaunch(*m, "affine_f32")
      .input(0, empty)
      .output(1, empty)
      .bytes(2, metalrt::testing::AffineArgs{0, 1, 0})
      .threads({0, 1, 1}, {32, 1, 1});
  CHECK(m->stream().open_dispatches() == 0);
  CHECK(m.device->counters.command_buffers == 0);
}
