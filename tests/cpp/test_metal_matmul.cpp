// Gates of the Metal matmul_bt and matmul kernels (metal/matmul.metal): op cases for
// the op-case table (test_op_cases.cpp) at the default model's and boundary shapes in
// every float dtype; and here f32 versus float64, which kernel and provider ran per m
// and K, the K-split GEMV in every fiber order, and a row slice of a larger allocation.
// Outputs are NaN-poisoned before each call.
#include <doctest/doctest.h>

#include <cmath>

#include "matmul_args.h"
#include "metal_op_testing.h"
#include "metalrt/ops.h"
#include "op_cases.h"
#include "sim_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

struct Shape3 {
  int64_t m, k, n;
};

// Worst |metal - oracle| relative to the output's largest magnitude: the oracle and the
// kernels both accumulate in f32 (in different orders), so f32 outputs differ by
// accumulation roundoff and f16/bf16 outputs by at most a rounding step or two.
double WorstBar(DType dtype) {
  if (dtype == DType::kF32) return 1e-5;
  return 4 * UnitRoundoff(dtype);
}

Tensor Product(bool transposed, const Tensor& a, const Tensor& b, const ops::OptTensor& out = std::nullopt) {
  return transposed ? ops::MatmulBT(a, b, out) : ops::Matmul(a, b, out);
}

// The kernel the host must pick (cpp/gpu/matmul.cpp): matmul_bt's GEMV for m <= 8 and
// K % 8 == 0, K-split by GemvSplits' rule, else its GEMM; matmul's GEMV for m == 1.
std::string ExpectedKernel(bool transposed, const Shape3& s, DType dtype) {
  if (!transposed) return gpu::KernelName("matmul", s.m == 1 ? "gemv" : "gemm", dtype);
  if (s.m > kGemvMaxM || s.k % kGemvChunk != 0) return gpu::KernelName("matmul_bt", "gemm", dtype);
  return gpu::KernelName("matmul_bt", GemvSplits(s.n, s.k) > 1 ? "gemv_splitk" : "gemv", dtype);
}

// One oracle-parity case of a.b^T (transposed) or a.b: NMSE <= 5e-4 and every element
// within WorstBar of the output's largest magnitude; the profiler must show
// ExpectedKernel.
OpCase ProductCase(const Shape3& s, DType dtype, uint32_t seed, bool transposed = true) {
  const std::string op = transposed ? "matmul_bt" : "matmul";
  const Tensor a = MakeFloat({s.m, s.k}, dtype, RandomValuesOf(dtype, s.m * s.k, seed));
  const Shape b_shape = transposed ? Shape{s.n, s.k} : Shape{s.k, s.n};
  const Tensor b = MakeFloat(b_shape, dtype, RandomValuesOf(dtype, s.n * s.k, seed + 1));
  OpCase c = SingleOutputCase(CaseName(op, dtype, {s.m, s.k, s.n}), op,
                              ExpectedKernel(transposed, s, dtype), {a, b}, {{s.m, s.n}, dtype},
                              {0.0, 0.0}, [transposed](const Inputs& in, const Tensor& out) {
                                Product(transposed, in[0], in[1], out);
                              });
  // K = 0 is an empty sum: the reference is all zeros and the bar demands exact zeros.
  c.max_rel = WorstBar(dtype);
  return c;
}

}  // namespace

METALRT_OP_CASES(matmul_cases) {
  std::vector<OpCase> cases;
  // 31/32/33 straddle the 32-wide tiles and SIMD-group width; K = 0 is an empty sum
  // (zeros); K % 8 != 0 sends matmul_bt to the GEMM at any m.
  const Shape3 boundary[] = {{1, 1, 1},   {2, 1, 1},   {1, 31, 33}, {1, 33, 5},  {33, 32, 31},
                             {31, 33, 32}, {32, 31, 33}, {3, 7, 65}, {4, 0, 3},   {1, 0, 2},
                             {37, 333, 201}};
  uint32_t seed = 4000;
  for (bool transposed : {true, false})
    for (DType dtype : kFloatDTypes)
      for (const Shape3& s : boundary) {
        cases.push_back(ProductCase(s, dtype, seed, transposed));
        seed += 2;
      }
  // matmul_bt's GEMV boundaries: m = 1, 2, 7, 8 (GEMV) and 9 (GEMM); K = 8 and 32 (one
  // chunk per lane and less than a SIMD-group's stretch), 576, 1544 (ragged against the
  // 256-value stretch; K-split) and 1540 (K % 8 != 0: the GEMM); N = 1, 3, 5 (a row
  // block cut short; with K = 2048 the 4-way split).
  const Shape3 gemv_boundary[] = {{1, 8, 5},     {2, 32, 3},    {7, 576, 5},  {8, 1544, 3},   {9, 576, 5},
                                  {1, 1540, 3},  {8, 1540, 1},  {1, 1544, 1}, {2, 2048, 3},   {1, 8, 1},
                                  {8, 32, 17},   {3, 576, 49}};
  for (DType dtype : kFloatDTypes)
    for (const Shape3& s : gemv_boundary) {
      cases.push_back(ProductCase(s, dtype, seed, true));
      seed += 2;
    }
  // The default model's decode shapes (SmolLM2-135M, bf16): qkv 960 x 576, o 576 x 576,
  // k/v 192 x 576, gate|up 3072 x 576 and 1536 x 576, down 576 x 1536 (K-split), lm_head
  // 49152 x 576; at m = 1 and at a batch of 8 (f16) for the ones a batch reaches first.
  const Shape3 model[] = {{1, 576, 960},  {1, 576, 576},  {1, 576, 192},   {1, 576, 3072},
                          {1, 576, 1536}, {1, 1536, 576}, {1, 576, 49152}};
  for (const Shape3& s : model) cases.push_back(ProductCase(s, DType::kBF16, seed++, true));
  for (const Shape3& s : {Shape3{8, 576, 960}, Shape3{8, 1536, 576}, Shape3{8, 576, 3072}})
    cases.push_back(ProductCase(s, DType::kF16, seed++, true));
  // Real shapes: decode GEMV, batched decode (m = 2 GEMV, 16 GEMM) and prefill (the 512-row one is
  // 2 GFLOP, about 50 s of CPU on the simulated device); the model dtype bf16 at the
  // large shapes, f16 at some others. The ragged 37x333x201 is among the boundary shapes.
  cases.push_back(ProductCase({1, 2048, 2048}, DType::kBF16, 10));
  cases.push_back(ProductCase({1, 2048, 2048}, DType::kF16, 12));
  cases.push_back(ProductCase({2, 2048, 2048}, DType::kBF16, 14));
  cases.push_back(ProductCase({16, 2048, 2048}, DType::kF16, 16));
  cases.push_back(ProductCase({32, 2048, 6144}, DType::kBF16, 20));
  cases.push_back(ProductCase({512, 2048, 2048}, DType::kBF16, 22));
  return cases;
}

TEST_CASE("metal matmul_bt: f32 GEMV and GEMM versus float64 (NMSE <= 1e-10)") {
  const Shape3 shapes[] = {{1, 2048, 2048}, {37, 333, 201}, {64, 1024, 96}};
  uint32_t seed = 5000;
  for (const Shape3& s : shapes) {
    CAPTURE(s.m);
    const std::vector<double> a = RandomValuesOf(DType::kF32, s.m * s.k, seed++);
    const std::vector<double> b = RandomValuesOf(DType::kF32, s.n * s.k, seed++);
    const Tensor out = PoisonedMetal({s.m, s.n}, DType::kF32);
    ops::MatmulBT(ToMetal(MakeFloat({s.m, s.k}, DType::kF32, a)),
                  ToMetal(MakeFloat({s.n, s.k}, DType::kF32, b)), out);
    std::vector<double> ref(static_cast<size_t>(s.m * s.n), 0.0);
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j)
        for (int64_t p = 0; p < s.k; ++p) ref[i * s.n + j] += a[i * s.k + p] * b[j * s.k + p];
    CHECK(Nmse(ReadMetal(out), ref) <= 1e-10);
  }
}

TEST_CASE("metal matmul_bt: the GEMV runs for m <= 8 and the GEMM for m > 8; matmul's GEMV for m = 1") {
  for (bool transposed : {true, false})
    for (DType dtype : kFloatDTypes) {
      const std::string op = transposed ? "matmul_bt" : "matmul";
      CAPTURE(op);
      CAPTURE(std::string(DTypeName(dtype)));
      const std::string suffix = gpu::KernelDTypeSuffix(dtype);
      const Tensor b = ToMetal(MakeFloat({40, 64}, dtype, RandomValuesOf(dtype, 40 * 64, 77)));
      const int64_t n = transposed ? 40 : 64, k = transposed ? 64 : 40;
      for (int64_t m : {1, 2, 8, 9, 16}) {
        CAPTURE(m);
        const Tensor a = ToMetal(MakeFloat({m, k}, dtype, RandomValuesOf(dtype, m * k, 78)));
        ResetProviderStats();
        const auto rows = ProfiledRows([&] { Product(transposed, a, b, PoisonedMetal({m, n}, dtype)); });
        const bool gemv = m <= (transposed ? 8 : 1);
        CHECK(Dispatches(rows, op + "_gemv_" + suffix) == (gemv ? 1u : 0u));
        CHECK(Dispatches(rows, op + "_gemm_" + suffix) == (gemv ? 0u : 1u));
        CheckNativeProvider(op, "metal_" + op, 1);
      }
    }
}

// What the GEMV's 4-wide loads cannot take goes to the GEMM (every shape and alignment),
// never to a wrong read: K % 8 != 0, or an activation view starting one element past an
// aligned address. Long rows on a small grid take the K split (2-way for down_proj's
// K = 1536, N = 576; 4-way for K = 2048, N = 3).
TEST_CASE("metal matmul_bt: the GEMM serves K % 8 != 0 and unaligned views; long rows split K") {
  struct Choice {
    int64_t m, k, n;
    int64_t offset;        // elements of a before the view
    const char* variant;   // the kernel the profiler must show
  };
  const Choice choices[] = {{1, 1540, 3, 0, "gemm"},   {8, 36, 5, 0, "gemm"},        {1, 64, 5, 1, "gemm"},
                            {4, 64, 5, 4, "gemv"},     {1, 1536, 576, 0, "gemv_splitk"}, {2, 2048, 3, 0, "gemv_splitk"},
                            {1, 576, 576, 0, "gemv"},  {1, 1536, 4096, 0, "gemv"}};
  CHECK(GemvSplits(576, 1536) == 2);
  CHECK(GemvSplits(3, 2048) == 4);
  CHECK(GemvSplits(49152, 576) == 1);
  for (DType dtype : kFloatDTypes)
    for (const Choice& c : choices) {
      CAPTURE(std::string(DTypeName(dtype)));
      CAPTURE(c.k);
      CAPTURE(c.offset);
      const std::vector<double> av = RandomValuesOf(dtype, c.offset + c.m * c.k, 79);
      const Tensor a_cpu = MakeFloat({c.offset + c.m * c.k}, dtype, av).Slice(0, c.offset, c.offset + c.m * c.k)
                               .Reshape({c.m, c.k});
      const Tensor b_cpu = MakeFloat({c.n, c.k}, dtype, RandomValuesOf(dtype, c.n * c.k, 80));
      const Tensor a = ToMetal(MakeFloat({c.offset + c.m * c.k}, dtype, av))
                           .Slice(0, c.offset, c.offset + c.m * c.k)
                           .Reshape({c.m, c.k});
      const Tensor out = PoisonedMetal({c.m, c.n}, dtype);
      ResetProviderStats();
      const auto rows = ProfiledRows([&] { ops::MatmulBT(a, ToMetal(b_cpu), out); });
      CHECK(Dispatches(rows, gpu::KernelName("matmul_bt", c.variant, dtype)) == 1u);
      CheckNativeProvider("matmul_bt", "metal_matmul_bt", 1);
      CHECK(Nmse(ReadMetal(out), ReadFloat(ops::MatmulBT(a_cpu, b_cpu))) <= 5e-4);
    }
}

// The K-split GEMV's reduction goes through threadgroup memory behind a barrier, in a
// fixed part order: every fiber order gives the same bits, within 1e-10 NMSE of float64.
TEST_CASE("metal matmul_bt: the K-split GEMV gives the same bits in every fiber order") {
  const int64_t m = 3, k = 2048, n = 7;   // 4-way split, a ragged second row block
  REQUIRE(GemvSplits(n, k) == 4);
  const std::vector<double> av = RandomValuesOf(DType::kF32, m * k, 81);
  const std::vector<double> bv = RandomValuesOf(DType::kF32, n * k, 82);
  const Tensor a = ToMetal(MakeFloat({m, k}, DType::kF32, av));
  const Tensor b = ToMetal(MakeFloat({n, k}, DType::kF32, bv));
  std::vector<double> ref(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) ref[i * n + j] += av[i * k + p] * bv[j * k + p];
  std::vector<double> first;
  for (const std::string& order : SimOrders()) {
    CAPTURE(order);
    const ScopedFiberOrder scoped(order);
    const Tensor out = PoisonedMetal({m, n}, DType::kF32);
    const auto rows = ProfiledRows([&] { ops::MatmulBT(a, b, out); });
    CHECK(Dispatches(rows, "matmul_bt_gemv_splitk_f32") == 1u);
    const std::vector<double> got = ReadMetal(out);
    CHECK(Nmse(got, ref) <= 1e-10);
    if (first.empty()) first = got;
    else CHECK(got == first);
  }
}

TEST_CASE("metal matmul_bt: rows [1, 3) of a 4-row allocation change only those rows") {
  const int64_t n = 37;
  for (int64_t k : {45, 48}) {   // K = 45 takes the GEMM, K = 48 the GEMV
    const std::vector<double> av = RandomValuesOf(DType::kF32, 4 * k, 90);
    const Tensor a_cpu = MakeFloat({4, k}, DType::kF32, av);
    const Tensor b_cpu = MakeFloat({n, k}, DType::kF32, RandomValuesOf(DType::kF32, n * k, 91));
    const Tensor a = ToMetal(a_cpu), b = ToMetal(b_cpu);
    for (int64_t rows : {1, 2}) {
      CAPTURE(k);
      CAPTURE(rows);
      const Tensor out = PoisonedMetal({4, n}, DType::kF32);
      ops::MatmulBT(a.Slice(0, 1, 1 + rows), b, out.Slice(0, 1, 1 + rows));
      const std::vector<double> got = ReadMetal(out);
      const std::vector<double> ref = ReadFloat(ops::MatmulBT(a_cpu.Slice(0, 1, 1 + rows), b_cpu));
      for (int64_t r = 0; r < 4; ++r)
        for (int64_t j = 0; j < n; ++j) {
          const double v = got[r * n + j];
          if (r >= 1 && r < 1 + rows) CHECK(std::fabs(v - ref[(r - 1) * n + j]) <= 1e-5);
          else CHECK(std::isnan(v));
        }
    }
  }
}
