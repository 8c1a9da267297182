// The MSL semantics suite of the simulated device: the kernels of tests/msl run
// through the generator, the shim and the runtime, each gate in several fiber
// orders, against references computed here.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <thread>

#include "metalrt/dtype.h"
#include "sim/fiber.h"
#include "sim_testing.h"

using namespace metalrt;
using metalrt::testing::ScopedFiberOrder;
using metalrt::testing::SimOrders;
using metalrt::testing::SimRun;

namespace {
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> Ramp(size_t n, float scale = 0.37f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 7919) % 101) - 17.0f;
  return v;
}

// The 24-uint record positions_uint3 writes for grid thread (x, y, z).
std::vector<uint32_t> ExpectedRecord(const uint32_t p[3], const uint32_t group_size[3],
                                     const uint32_t grid[3]) {
  uint32_t g[3], l[3], size[3], groups[3];
  for (int a = 0; a < 3; ++a) {
    g[a] = p[a] / group_size[a];
    l[a] = p[a] % group_size[a];
    groups[a] = (grid[a] + group_size[a] - 1) / group_size[a];
    size[a] = std::min(group_size[a], grid[a] - g[a] * group_size[a]);   // partial edges
  }
  const uint32_t index = l[0] + l[1] * size[0] + l[2] * size[0] * size[1];
  const uint32_t threads = size[0] * size[1] * size[2];
  return {p[0], p[1], p[2], g[0], g[1], g[2], l[0], l[1], l[2], size[0], size[1], size[2],
          groups[0], groups[1], groups[2], grid[0], grid[1], grid[2],
          index, index % 32, index / 32, (threads + 31) / 32, 32, 32};
}

void CheckPositions(SimRun& run, const std::string& kernel, gpu::Size3 grid3, gpu::Size3 group3,
                    bool grid_is_threads) {
  const uint32_t group[3] = {group3.x, group3.y, group3.z};
  uint32_t grid[3] = {grid3.x, grid3.y, grid3.z};
  if (!grid_is_threads)
    for (int a = 0; a < 3; ++a) grid[a] *= group[a];
  const size_t threads = size_t{grid[0]} * grid[1] * grid[2];
  auto out = run.Buffer(std::vector<uint32_t>(threads * 24, 0xDEADBEEFu));
  REQUIRE(run.Run({kernel, {out}, grid3, group3, grid_is_threads}) == "");
  const auto got = SimRun::Read<uint32_t>(*out);
  size_t mismatches = 0;
  for (uint32_t z = 0; z < grid[2]; ++z)
    for (uint32_t y = 0; y < grid[1]; ++y)
      for (uint32_t x = 0; x < grid[0]; ++x) {
        const uint32_t p[3] = {x, y, z};
        const auto want = ExpectedRecord(p, group, grid);
        const size_t at = ((size_t{z} * grid[1] + y) * grid[0] + x) * 24;
        for (int f = 0; f < 24; ++f) {
          const bool skip_z = kernel == "positions_short" && f % 3 == 2 && f < 18;
          if (!skip_z && got[at + f] != want[f] && ++mismatches <= 5)
            FAIL_CHECK(kernel << " thread (" << x << ", " << y << ", " << z << ") field " << f
                              << ": got " << got[at + f] << ", want " << want[f]);
        }
      }
  CHECK(mismatches == 0);
}
}  // namespace

TEST_CASE("sim MSL: every position attribute, full and partial threadgroups") {
  SimRun run;
  for (const auto& order : SimOrders()) {
    CAPTURE(order);
    ScopedFiberOrder scoped(order);
    CheckPositions(run, "positions_uint3", {37, 5, 3}, {8, 4, 2}, true);     // partial in x, y, z
    CheckPositions(run, "positions_uint3", {3, 2, 2}, {16, 4, 1}, false);    // whole groups
    CheckPositions(run, "positions_uint3", {1, 1, 1}, {1, 1, 1}, true);
    CheckPositions(run, "positions_short", {33, 3, 1}, {32, 2, 1}, true);
  }
  // Scalar forms on a 1-D grid whose last group has 232 of 256 threads.
  auto out = run.Buffer(std::vector<uint32_t>(1000 * 6, 0xDEADBEEFu));
  REQUIRE(run.Run({"positions_scalar", {out}, {1000, 1, 1}, {256, 1, 1}}) == "");
  const auto got = SimRun::Read<uint32_t>(*out);
  for (uint32_t i = 0; i < 1000; ++i) {
    const uint32_t want[6] = {i, i / 256, i % 256, i / 256 == 3 ? 232u : 256u, 4, 1000};
    for (int f = 0; f < 6; ++f) REQUIRE(got[i * 6 + f] == want[f]);
  }
}

TEST_CASE("sim MSL: threadgroup-array reduction with barriers, every size and order") {
  SimRun run;
  for (uint32_t size : {1u, 2u, 32u, 64u, 1024u}) {
    const uint32_t groups = 3;
    const auto in = Ramp(size * groups);
    for (const auto& order : SimOrders()) {
      CAPTURE(size);
      CAPTURE(order);
      ScopedFiberOrder scoped(order);
      auto out = run.Buffer(std::vector<float>(groups, kNaN));
      REQUIRE(run.Run({"reduce_tree", {run.Buffer(in), out}, {groups, 1, 1}, {size, 1, 1}, false}) == "");
      const auto got = SimRun::Read<float>(*out);
      for (uint32_t g = 0; g < groups; ++g) {
        double want = 0, magnitude = 0;
        for (uint32_t i = 0; i < size; ++i) {
          want += in[g * size + i];
          magnitude += std::fabs(in[g * size + i]);
        }
        CHECK(std::fabs(got[g] - want) <= 1e-6 * magnitude * std::log2(2.0 * size));
      }
    }
  }
}

TEST_CASE("sim MSL: a reduction with its barriers removed is detected") {
  // Forward order runs thread 0 through the whole loop before any other thread has
  // written its element: it reads the NaN poison, deterministically. Reverse order
  // happens to produce the sum: the orders disagree, which is the other signal.
  SimRun run;
  const uint32_t size = 64, groups = 2;
  const auto in = Ramp(size * groups);
  std::vector<std::vector<float>> results;
  for (const char* order : {"forward", "reverse"}) {
    ScopedFiberOrder scoped(order);
    auto out = run.Buffer(std::vector<float>(groups, 0.0f));
    REQUIRE(run.Run({"reduce_tree_no_barrier", {run.Buffer(in), out}, {groups, 1, 1}, {size, 1, 1}, false}) == "");
    results.push_back(SimRun::Read<float>(*out));
  }
  for (uint32_t g = 0; g < groups; ++g) {
    CHECK(std::isnan(results[0][g]));
    CHECK_FALSE(std::isnan(results[1][g]));
  }
}

TEST_CASE("sim MSL: SIMD-group + threadgroup sum; returned threads neither block nor count") {
  SimRun run;
  const auto in = Ramp(1024);
  for (auto [size, n] : std::vector<std::pair<uint32_t, uint32_t>>{
           {1024, 1024}, {1024, 1000}, {33, 33}, {33, 1}, {31, 31}, {64, 40}, {1, 1}}) {
    double want = 0;
    for (uint32_t i = 0; i < n; ++i) want += in[i];
    for (const auto& order : SimOrders()) {
      CAPTURE(size);
      CAPTURE(n);
      CAPTURE(order);
      ScopedFiberOrder scoped(order);
      auto out = run.Buffer(std::vector<float>{kNaN});
      REQUIRE(run.Run({"reduce_two_level", {run.Buffer(in), out, run.Buffer(std::vector<uint32_t>{n})},
                       {1, 1, 1}, {size, 1, 1}, false}) == "");
      CHECK(SimRun::Read<float>(*out)[0] == doctest::Approx(want).epsilon(1e-5));
    }
  }
}

TEST_CASE("sim MSL: dynamic threadgroup memory in partial groups; poisoned memory") {
  SimRun run;
  const auto in = Ramp(100);
  for (const auto& order : SimOrders()) {
    CAPTURE(order);
    ScopedFiberOrder scoped(order);
    auto out = run.Buffer(std::vector<float>(100, kNaN));
    SimRun::Dispatch d{"reverse_through_scratch", {run.Buffer(in), out}, {100, 1, 1}, {32, 1, 1}};
    d.threadgroup_lengths = {32 * sizeof(float)};
    REQUIRE(run.Run(d) == "");
    const auto got = SimRun::Read<float>(*out);
    for (uint32_t i = 0; i < 100; ++i) {
      const uint32_t base = i / 32 * 32, size = std::min(32u, 100 - base);   // last group: 4
      CHECK(got[i] == in[base + size - 1 - (i - base)]);
    }
  }
  auto floats = run.Buffer(std::vector<float>(64, 0.0f));
  auto bits = run.Buffer(std::vector<uint32_t>(64, 0));
  REQUIRE(run.Run({"read_unwritten", {floats, bits}, {64, 1, 1}, {64, 1, 1}}) == "");
  for (float f : SimRun::Read<float>(*floats)) CHECK(std::isnan(f));
  for (uint32_t u : SimRun::Read<uint32_t>(*bits)) CHECK(u == 0xFFFFFFFFu);
}

TEST_CASE("sim MSL: function constants specialise pipelines") {
  SimRun run;
  const auto x = Ramp(40);
  const auto bias = Ramp(40, -0.11f);
  auto constant = [](uint32_t index, gpu::FunctionConstant::Type type, auto value) {
    gpu::FunctionConstant c;
    c.index = index;
    c.type = type;
    std::memcpy(c.bytes.data(), &value, sizeof(value));
    return c;
  };
  using Type = gpu::FunctionConstant::Type;
  const gpu::FunctionConstants plain = {constant(0, Type::kBool, false), constant(1, Type::kFloat, 2.0f)};
  const gpu::FunctionConstants biased = {constant(0, Type::kBool, true), constant(1, Type::kFloat, 0.5f),
                                         constant(2, Type::kInt32, int32_t{3}),
                                         constant(3, Type::kHalf, F32ToF16(-2.0f))};
  auto xb = run.Buffer(x), bb = run.Buffer(bias);
  auto y1 = run.Buffer(std::vector<float>(40, kNaN)), y2 = run.Buffer(std::vector<float>(40, kNaN));
  // Both pipelines in one command buffer: each dispatch sees its own values.
  auto cb = run.device->new_command_buffer();
  run.Encode(*cb, {"fc_affine", {xb, y1}, {40, 1, 1}, {16, 1, 1}, true, plain});   // bias unbound: fine
  run.Encode(*cb, {"fc_affine", {xb, y2, bb}, {40, 1, 1}, {16, 1, 1}, true, biased});
  cb->commit();
  cb->wait_until_completed();
  REQUIRE(cb->error() == "");
  const auto got1 = SimRun::Read<float>(*y1), got2 = SimRun::Read<float>(*y2);
  for (int i = 0; i < 40; ++i) {
    CHECK(got1[i] == 2.0f * x[i]);
    CHECK(got2[i] == doctest::Approx(-2.0 * (0.5 * x[i] + bias[i] + 3.0)).epsilon(1e-6));
  }
  CHECK(&run.device->default_library().pipeline("fc_affine", plain) ==
        &run.device->default_library().pipeline("fc_affine", plain));   // cached
  auto cb2 = run.device->new_command_buffer();
  CHECK_THROWS_WITH_AS(run.Encode(*cb2, {"fc_affine", {xb, y1}, {40, 1, 1}, {16, 1, 1}, true, biased}),
                       "[dispatch] kernel 'fc_affine': [[buffer(2)]] is used by the kernel but not bound",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run.device->default_library().pipeline("fc_affine", {constant(1, Type::kBool, true)}),
                       doctest::Contains("function constant 1 ('scale') is 4 bytes"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(run.device->default_library().pipeline("fc_affine", {constant(9, Type::kInt32, 1)}),
                       doctest::Contains("has no function constant 9"), std::invalid_argument);
}

TEST_CASE("sim MSL: a function constant a kernel uses needs a value at pipeline creation") {
  // Metal fails newFunctionWithName:constantValues:error: without a value for every
  // constant the function uses, unless it only tests it with is_function_constant_defined.
  SimRun run;
  auto& library = run.device->default_library();
  gpu::FunctionConstant stride;
  stride.index = 4;
  stride.type = gpu::FunctionConstant::Type::kUInt32;
  const uint32_t two = 2;
  std::memcpy(stride.bytes.data(), &two, sizeof two);
  gpu::FunctionConstant no_bias;
  no_bias.index = 0;
  no_bias.type = gpu::FunctionConstant::Type::kBool;
  no_bias.bytes[0] = 0;

  std::string missing_scale;
  try {
    library.pipeline("fc_affine", {no_bias});
  } catch (const std::invalid_argument& e) {
    missing_scale = e.what();
  }
  CHECK(missing_scale.find("[pipeline] kernel 'fc_affine' (") == 0);
  CHECK(missing_scale.find("sim_function_constants.metal:") != std::string::npos);
  CHECK(missing_scale.find("uses function constant 1 ('scale') but no value was given") != std::string::npos);
  CHECK_THROWS_WITH_AS(library.pipeline("fc_affine"),
                       doctest::Contains("uses function constant 0 ('has_bias')"), std::invalid_argument);
  // Reached only through a helper: required all the same.
  CHECK_THROWS_WITH_AS(library.pipeline("fc_strided_copy"),
                       doctest::Contains("uses function constant 4 ('stride')"), std::invalid_argument);
  // Constants are per kernel: one that uses none needs none.
  library.pipeline("fc_plain_copy");

  const auto x = Ramp(66);
  auto y = run.Buffer(std::vector<float>(33, kNaN));
  SimRun::Dispatch d{"fc_strided_copy", {run.Buffer(x), y}, {33, 1, 1}, {32, 1, 1}};
  d.constants = {stride};
  REQUIRE(run.Run(d) == "");
  for (int i = 0; i < 33; ++i) CHECK(SimRun::Read<float>(*y)[i] == x[2 * i]);
}

TEST_CASE("sim MSL: templated kernels registered by host_name") {
  SimRun run;
  const auto names = run.device->default_library().function_names();
  for (const char* n : {"times3_f32", "times5_i32", "times2_f16", "times7_u32"})
    CHECK(std::find(names.begin(), names.end(), n) != names.end());
  CHECK(std::find(names.begin(), names.end(), "times") == names.end());
  const auto x = Ramp(33);
  auto y = run.Buffer(std::vector<float>(33, kNaN));
  REQUIRE(run.Run({"times3_f32", {run.Buffer(x), y}, {33, 1, 1}, {32, 1, 1}}) == "");
  for (int i = 0; i < 33; ++i) CHECK(SimRun::Read<float>(*y)[i] == 3.0f * x[i]);
  std::vector<int32_t> xi(33);
  for (int i = 0; i < 33; ++i) xi[i] = i - 16;
  auto yi = run.Buffer(std::vector<int32_t>(33, -1));
  REQUIRE(run.Run({"times5_i32", {run.Buffer(xi), yi}, {33, 1, 1}, {32, 1, 1}}) == "");
  for (int i = 0; i < 33; ++i) CHECK(SimRun::Read<int32_t>(*yi)[i] == 5 * (i - 16));
  std::vector<uint32_t> xu(33);
  for (uint32_t i = 0; i < 33; ++i) xu[i] = 1000 * i + 3;
  auto yu = run.Buffer(std::vector<uint32_t>(33, 0));
  REQUIRE(run.Run({"times7_u32", {run.Buffer(xu), yu}, {33, 1, 1}, {32, 1, 1}}) == "");
  for (uint32_t i = 0; i < 33; ++i) CHECK(SimRun::Read<uint32_t>(*yu)[i] == 7 * (1000 * i + 3));
  std::vector<uint16_t> xh(33);
  for (int i = 0; i < 33; ++i) xh[i] = F32ToF16(x[i]);
  auto yh = run.Buffer(std::vector<uint16_t>(33, 0x7E00));
  REQUIRE(run.Run({"times2_f16", {run.Buffer(xh), yh}, {33, 1, 1}, {32, 1, 1}}) == "");
  for (int i = 0; i < 33; ++i) CHECK(SimRun::Read<uint16_t>(*yh)[i] == F32ToF16(2.0f * F16ToF32(xh[i])));
}

TEST_CASE("sim MSL: [[max_total_threads_per_threadgroup(N)]] caps the pipeline at N") {
  SimRun run;
  CHECK(run.device->default_library().pipeline("capped_times_f32").max_total_threads_per_threadgroup() == 64);
  CHECK(run.device->default_library().pipeline("times3_f32").max_total_threads_per_threadgroup() == 1024);
  const auto x = Ramp(128);
  auto y = run.Buffer(std::vector<float>(128, kNaN));
  REQUIRE(run.Run({"capped_times_f32", {run.Buffer(x), y}, {128, 1, 1}, {64, 1, 1}}) == "");
  for (int i = 0; i < 128; ++i) CHECK(SimRun::Read<float>(*y)[i] == 4.0f * x[i]);
  auto cb = run.device->new_command_buffer();
  CHECK_THROWS_WITH_AS(run.Encode(*cb, {"capped_times_f32", {run.Buffer(x), y}, {128, 1, 1}, {65, 1, 1}}),
                       doctest::Contains("[dispatch] kernel 'capped_times_f32': 65 threads per threadgroup "
                                         "(65, 1, 1) exceed its [[max_total_threads_per_threadgroup(64)]] ("),
                       std::invalid_argument);
}

TEST_CASE("sim MSL: SIMD-group functions after early returns, shuffles at the edge lanes") {
  SimRun run;
  const auto x = Ramp(96);
  for (const auto& order : SimOrders()) {
    CAPTURE(order);
    ScopedFiberOrder scoped(order);
    for (uint32_t active : {1u, 17u, 32u}) {
      auto out = run.Buffer(std::vector<float>(96, kNaN));
      REQUIRE(run.Run({"simd_sum_after_return", {run.Buffer(x), out, run.Buffer(std::vector<uint32_t>{active})},
                       {96, 1, 1}, {64, 1, 1}}) == "");
      const auto got = SimRun::Read<float>(*out);
      for (uint32_t i = 0; i < 96; ++i) {
        const uint32_t lane = i % 32, base = i - lane;
        if (lane >= active) {
          CHECK(std::isnan(got[i]));
          continue;
        }
        double want = 0;
        for (uint32_t l = 0; l < active; ++l) want += x[base + l];
        CHECK(got[i] == doctest::Approx(want).epsilon(1e-6));
      }
    }
    // 40 threads in groups of 40: SIMD-groups of 32 and 8 lanes.
    auto shuffled = run.Buffer(std::vector<float>(40, kNaN)), scanned = run.Buffer(std::vector<float>(40, kNaN));
    REQUIRE(run.Run({"simd_shuffle_and_scan", {run.Buffer(x), shuffled, scanned}, {40, 1, 1}, {40, 1, 1}}) == "");
    const auto sh = SimRun::Read<float>(*shuffled), sc = SimRun::Read<float>(*scanned);
    for (uint32_t i = 0; i < 40; ++i) {
      const uint32_t lane = i % 32, lanes = i < 32 ? 32 : 8;
      // Lanes 8..31 of the partial group do not exist: reading them is undefined
      // on a GPU and NaN here; past lane 31 a lane keeps its own value.
      if (lane + 3 < lanes) CHECK(sh[i] == x[i + 3]);
      else if (lane + 3 >= 32) CHECK(sh[i] == x[i]);
      else CHECK(std::isnan(sh[i]));
      double prefix = 0;
      for (uint32_t l = 0; l < lane; ++l) prefix += x[i - lane + l];
      CHECK(sc[i] == doctest::Approx(prefix).epsilon(1e-6));
    }
  }
}

TEST_CASE("sim MSL: simdgroup-matrix tiled matmul and cross-threadgroup atomics") {
  SimRun run;
  const uint32_t m = 24, n = 16, k = 40;
  const auto a = Ramp(m * k, 0.05f), b = Ramp(k * n, -0.03f);
  for (const auto& order : SimOrders()) {
    CAPTURE(order);
    ScopedFiberOrder scoped(order);
    auto c = run.Buffer(std::vector<float>(m * n, kNaN));
    const uint32_t tiles = (m / 8) * (n / 8);
    REQUIRE(run.Run({"simdgroup_matmul",
                     {run.Buffer(a), run.Buffer(b), c, run.Buffer(std::vector<uint32_t>{m, n, k, 0})},
                     {1, 1, 1}, {32 * tiles, 1, 1}, false}) == "");
    const auto got = SimRun::Read<float>(*c);
    for (uint32_t i = 0; i < m; ++i)
      for (uint32_t j = 0; j < n; ++j) {
        double want = 0, magnitude = 0;
        for (uint32_t p = 0; p < k; ++p) {
          want += double(a[i * k + p]) * b[p * n + j];
          magnitude += std::fabs(double(a[i * k + p]) * b[p * n + j]);
        }
        CHECK(std::fabs(got[i * n + j] - want) <= 1e-6 * magnitude + 1e-7);
      }
  }
  auto total = run.Buffer(std::vector<uint32_t>{0});
  REQUIRE(run.Run({"atomic_total", {total}, {5000, 1, 1}, {64, 1, 1}}) == "");
  CHECK(SimRun::Read<uint32_t>(*total)[0] == 5000u * 4999u / 2);
}

TEST_CASE("sim MSL: rule-breaking kernels raise clear errors") {
  SimRun run;
  auto out = run.Buffer(std::vector<float>(64, 0.0f));
  const std::string divergent = run.Run({"divergent_barrier", {out}, {64, 1, 1}, {64, 1, 1}});
  CHECK(divergent.find("[sim] kernel 'divergent_barrier'") == 0);
  CHECK(divergent.find("divergent threadgroup_barrier: reached at") != std::string::npos);
  CHECK(divergent.find("sim_faults.metal:") != std::string::npos);

  auto cb = run.device->new_command_buffer();
  run.Encode(*cb, {"too_much_threadgroup_memory", {out}, {64, 1, 1}, {64, 1, 1}});
  cb->commit();
  cb->wait_until_completed();
  CHECK(cb->status() == gpu::GpuCommandBuffer::Status::kError);
  CHECK(cb->error().find("[sim] kernel 'too_much_threadgroup_memory'") == 0);
  CHECK(cb->error().find("threadgroup memory of 33792 bytes exceeds the 32 KiB") != std::string::npos);

  auto fresh = run.device->new_command_buffer();
  CHECK_THROWS_WITH_AS(run.Encode(*fresh, {"reduce_tree", {out}, {1, 1, 1}, {64, 1, 1}, false}),
                       "[dispatch] kernel 'reduce_tree': [[buffer(1)]] is used by the kernel but not bound",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run.Encode(*fresh, {"reduce_tree", {out, out}, {1, 1, 1}, {1025, 1, 1}, false}),
                       doctest::Contains("1025 threads per threadgroup (1025, 1, 1); the limit is 1 to 1024"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run.Encode(*fresh, {"reverse_through_scratch", {out, out}, {64, 1, 1}, {32, 1, 1}}),
                       doctest::Contains("[[threadgroup(0)]] is used by the kernel but its length is not set"),
                       std::invalid_argument);
  for (const std::string& order : SimOrders()) {
    CAPTURE(order);
    ScopedFiberOrder scoped(order);
    auto probe = [&](int32_t i, int32_t j, int32_t mode) {
      auto value = run.Buffer(std::vector<float>{kNaN});
      const std::string error =
          run.Run({"threadgroup_index_probe", {value, run.Buffer(std::vector<int32_t>{i, j, mode})},
                   {32, 1, 1}, {32, 1, 1}});
      return error.empty() ? std::to_string(SimRun::Read<float>(*value)[0]) : error;
    };
    CHECK(probe(31, 0, 0) == std::to_string(31.0f));
    CHECK(probe(3, 7, 1) == std::to_string(131.0f));
    CHECK(probe(0, 0, 2) == std::to_string(100.0f));
    // Out of bounds: a kernel error naming the kernel, the array, its declaration,
    // the index and the thread, where a GPU would read the neighbouring array.
    const std::string past_end = probe(32, 0, 0);
    CHECK(past_end.find("[sim] kernel 'threadgroup_index_probe'") == 0);
    CHECK(past_end.find("threadgroup array 'row' (") != std::string::npos);
    CHECK(past_end.find("sim_faults.metal:41): index 32 is out of bounds [0, 32) (thread 0 of threadgroup (0, 0, 0))") !=
          std::string::npos);
    CHECK(probe(-1, 0, 0).find("'row' (") != std::string::npos);
    CHECK(probe(-1, 0, 0).find("index -1 is out of bounds [0, 32)") != std::string::npos);
    CHECK(probe(4, 0, 1).find("'grid' (") != std::string::npos);
    CHECK(probe(4, 0, 1).find("index 4 is out of bounds [0, 4)") != std::string::npos);
    CHECK(probe(1, 8, 1).find("index 8 in dimension 1 is out of bounds [0, 8)") != std::string::npos);
    CHECK(probe(32, 0, 2).find("'row' (") != std::string::npos);   // writes too

    // Through a pointer the subscripts are not checked, but the guard bytes after
    // every allocation are, at the next barrier or at the threadgroup's end.
    auto pointer_out = run.Buffer(std::vector<float>(33, kNaN));
    REQUIRE(run.Run({"threadgroup_pointer_overrun", {pointer_out}, {32, 1, 1}, {32, 1, 1}}) == "");
    const std::string through_pointer =
        run.Run({"threadgroup_pointer_overrun", {pointer_out}, {33, 1, 1}, {33, 1, 1}});
    CHECK(through_pointer.find("[sim] kernel 'threadgroup_pointer_overrun'") == 0);
    CHECK(through_pointer.find("threadgroup variable 'staged' (") != std::string::npos);
    CHECK(through_pointer.find("sim_faults.metal:61) was written past its end through a pointer (at byte 128; "
                               "it has 128), found at the threadgroup_barrier at ") != std::string::npos);
    CHECK(through_pointer.find("sim_faults.metal:63") != std::string::npos);
    SimRun::Dispatch buffer_overrun{"threadgroup_buffer_overrun", {pointer_out}, {16, 1, 1}, {16, 1, 1}};
    buffer_overrun.threadgroup_lengths = {64};
    REQUIRE(run.Run(buffer_overrun) == "");
    buffer_overrun.grid = buffer_overrun.group = {17, 1, 1};
    CHECK(run.Run(buffer_overrun).find("[[threadgroup(0)]] buffer was written past its end through a pointer "
                                       "(at byte 64; it has 64), found when the threadgroup finished") !=
          std::string::npos);
  }

  // The device is still usable after the faults.
  auto sum = run.Buffer(std::vector<float>{kNaN});
  REQUIRE(run.Run({"reduce_tree", {run.Buffer(std::vector<float>(4, 1.5f)), sum}, {1, 1, 1}, {4, 1, 1}, false}) == "");
  CHECK(SimRun::Read<float>(*sum)[0] == 6.0f);
}

TEST_CASE("sim MSL: fiber stacks that cannot be mapped are a command-buffer error") {
  // A fresh device: its workers have mapped no stacks yet, so the dispatch needs new ones.
  SimRun run;
  auto out = run.Buffer(std::vector<uint32_t>(64 * 6, 0xDEADBEEFu));
  sim::FailFiberStackMapsForTesting(true);
  const std::string error = run.Run({"positions_scalar", {out}, {64, 1, 1}, {64, 1, 1}});
  sim::FailFiberStackMapsForTesting(false);
  CHECK(error.find("[sim] kernel 'positions_scalar'") == 0);
  CHECK(error.find("could not map fiber stacks for a threadgroup of 64 threads") != std::string::npos);
  CHECK(error.find("set METALRT_SIM_THREADS lower") != std::string::npos);
  // The device recovers once stacks can be mapped again.
  REQUIRE(run.Run({"positions_scalar", {out}, {64, 1, 1}, {64, 1, 1}}) == "");
  CHECK(SimRun::Read<uint32_t>(*out)[63 * 6] == 63);
}

TEST_CASE("sim MSL: command buffers run asynchronously; a missing wait sees stale data") {
  SimRun run;
  auto flag = run.Buffer(std::vector<int32_t>{0});
  auto out = run.Buffer(std::vector<float>(8, kNaN));
  auto cb = run.device->new_command_buffer();
  run.Encode(*cb, {"wait_for_host", {flag, out}, {8, 1, 1}, {8, 1, 1}});
  cb->commit();
  // The kernel cannot finish before the flag is set: what the host reads now is stale.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(cb->status() == gpu::GpuCommandBuffer::Status::kCommitted);
  for (float f : SimRun::Read<float>(*out)) CHECK(std::isnan(f));
  __atomic_store_n(static_cast<int32_t*>(flag->contents()), 1, __ATOMIC_RELEASE);
  cb->wait_until_completed();
  CHECK(cb->status() == gpu::GpuCommandBuffer::Status::kCompleted);
  const auto got = SimRun::Read<float>(*out);
  for (int i = 0; i < 8; ++i) CHECK(got[i] == i + 0.5f);
  CHECK(cb->gpu_end_time() >= cb->gpu_start_time());
}
