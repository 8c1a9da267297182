// Gates of the Metal qkv_split kernels (metal/qkv_split.metal): every dtype, unequal
// and odd widths, real merged-projection widths (2048 + 512 + 512, SmolLM2's
// 576 + 192 + 192), bit-exact against the CPU oracle through the op-case table on
// random bit patterns; plus rows of a view.
#include <doctest/doctest.h>

#include <tuple>

#include "metal_op_testing.h"
#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

OpCase QkvSplitCase(DType dtype, int64_t tokens, int64_t q, int64_t k, int64_t v, uint32_t seed) {
  OpCase c;
  c.name = CaseName("qkv_split", dtype, {tokens, q, k, v});
  c.op = "qkv_split";
  c.provider = "metal_qkv_split";
  c.kernels = {gpu::KernelName("qkv_split", "", dtype)};
  c.inputs = {RandomBits({tokens, q + k + v}, dtype, seed)};
  c.run = [q, k, v](const Inputs& in, const Outputs&) {
    auto [q_out, k_out, v_out] = ops::QkvSplit(in[0], q, k, v);
    return Returned{q_out, k_out, v_out};
  };
  c.match = Match::kBitExact;
  return c;
}

}  // namespace

METALRT_OP_CASES(qkv_split_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 1200;
  for (DType dtype : kAllDTypes)
    for (auto [tokens, q, k, v] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 1, 1, 1}, {5, 7, 3, 5},
                                   {33, 31, 32, 33}, {3, 300, 1, 257}})
      cases.push_back(QkvSplitCase(dtype, tokens, q, k, v, seed++));
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    cases.push_back(QkvSplitCase(dtype, 1, 2048, 512, 512, seed++));
    cases.push_back(QkvSplitCase(dtype, 37, 576, 192, 192, seed++));
  }
  return cases;
}

TEST_CASE("metal qkv_split: rows [1, 3) of a 4-row qkv give those rows") {
  const Tensor qkv = RandomBits({4, 15}, DType::kF32, 1290);
  auto [q, k, v] = ops::QkvSplit(ToMetal(qkv).Slice(0, 1, 3), 7, 3, 5);
  auto [q_ref, k_ref, v_ref] = ops::QkvSplit(qkv.Slice(0, 1, 3), 7, 3, 5);
  CHECK(Bytes(CopyToDevice(q, DeviceType::kCPU)) == Bytes(q_ref));
  CHECK(Bytes(CopyToDevice(k, DeviceType::kCPU)) == Bytes(k_ref));
  CHECK(Bytes(CopyToDevice(v, DeviceType::kCPU)) == Bytes(v_ref));
}
