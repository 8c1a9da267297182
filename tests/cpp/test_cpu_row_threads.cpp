// The CPU oracle's row ops (RoPE, add/mul, relu/gelu, embedding) spread rows or chunks
// of elements over ParallelFor's threads; each output's arithmetic is the same on any
// thread split, so a prefill-sized call gives the same bytes on one thread and on the
// pool (the oracle is the spec the Metal kernels and fast providers are gated against).
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <numeric>

#include "cpu/parallel.h"
#include "metalrt/ops.h"
#include "op_testing.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

// The bytes of run() on one thread and on every thread of the pool (at least two).
void CheckSameOnAnyThreadCount(const std::function<Tensor()>& run) {
  Tensor one;
  {
    const cpu::ScopedParallelThreadLimit limit(1);
    one = run();
  }
  const cpu::ScopedParallelThreadLimit limit(std::max(2u, cpu::ParallelThreadCount()));
  const Tensor pool = run();
  REQUIRE(pool.nbytes() == one.nbytes());
  CHECK(std::memcmp(pool.data(), one.data(), one.nbytes()) == 0);
}

}  // namespace

TEST_CASE("cpu row ops: a prefill-sized call gives the same bytes on one thread and on the pool") {
  const int64_t tokens = 130, heads = 9, head_dim = 64, hidden = heads * head_dim;
  std::vector<int32_t> pos(tokens);
  std::iota(pos.begin(), pos.end(), 7);
  const Tensor positions = MakeInts<int32_t>({tokens}, DType::kI32, pos);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    CAPTURE(DTypeName(dtype));
    const Tensor x = MakeFloat({tokens, heads, head_dim}, dtype, RandomValuesOf(dtype, tokens * hidden, 31));
    const Tensor y = MakeFloat({tokens, hidden}, dtype, RandomValuesOf(dtype, tokens * hidden, 32));
    const Tensor row = MakeFloat({hidden}, dtype, RandomValuesOf(dtype, hidden, 33));
    const Tensor flat = MakeFloat({tokens, hidden}, dtype, RandomValuesOf(dtype, tokens * hidden, 34));
    CheckSameOnAnyThreadCount([&] { return ops::RopeNeox(x, positions, head_dim, 10000.0f); });
    CheckSameOnAnyThreadCount([&] { return ops::RopeInterleaved(x, positions, 48, 100000.0f); });
    const Tensor cache = ops::RopeCosSinCache(MakeInts<int32_t>({200}, DType::kI32, [] {
      std::vector<int32_t> p(200);
      std::iota(p.begin(), p.end(), 0);
      return p;
    }()), head_dim, 10000.0f);
    CheckSameOnAnyThreadCount([&] { return ops::RopeCosSinCache(positions, head_dim, 10000.0f); });
    CheckSameOnAnyThreadCount([&] { return ops::RopeFromCache(x, cache, positions, true); });
    CheckSameOnAnyThreadCount([&] { return ops::Add(flat, y); });
    CheckSameOnAnyThreadCount([&] { return ops::Mul(flat, row); });   // b broadcast over rows
    CheckSameOnAnyThreadCount([&] { return ops::Gelu(flat); });
    CheckSameOnAnyThreadCount([&] { return ops::Relu(flat); });
    std::vector<int32_t> ids(tokens);
    for (int64_t t = 0; t < tokens; ++t) ids[t] = static_cast<int32_t>((t * 37) % 500);
    const Tensor table = MakeFloat({500, hidden}, dtype, RandomValuesOf(dtype, 500 * hidden, 35));
    CheckSameOnAnyThreadCount([&] { return ops::Embedding(table, MakeInts<int32_t>({tokens}, DType::kI32, ids)); });
  }
}
