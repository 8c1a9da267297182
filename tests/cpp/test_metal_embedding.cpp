// Gates of the Metal embedding kernels (metal/embedding.metal): every dtype, bit-exact
// against the CPU oracle through the op-case table (weights of random bytes, so NaN
// payloads and every bit pattern must survive the copy), boundary dims around the
// SIMD width and the 256-thread group, a real vocabulary (OPT's 50,272 rows); plus
// the kernel's own answer to an out-of-range id, and the entry point's check.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <tuple>

#include "embedding_args.h"
#include "metal_op_testing.h"
#include "op_cases.h"

using namespace metalrt;
using namespace metalrt::testing;

namespace {

// `tokens` ids in [0, vocab) with the last row and a repeat among them.
Tensor Ids(int64_t vocab, int64_t tokens, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (int32_t& id : ids) id = static_cast<int32_t>(gen() % static_cast<uint32_t>(vocab));
  ids[0] = static_cast<int32_t>(vocab - 1);
  if (tokens > 2) ids[2] = ids[1];
  return MakeInts<int32_t>({tokens}, DType::kI32, ids);
}

OpCase EmbeddingCase(DType dtype, int64_t vocab, int64_t dim, int64_t tokens, uint32_t seed,
                     const std::string& variant = "") {
  return BitExact(SingleOutputCase(
      CaseName("embedding", dtype, {vocab, dim, tokens}, variant), "embedding",
      gpu::KernelName("embedding", "gather", dtype),
      {RandomBits({vocab, dim}, dtype, seed), Ids(vocab, tokens, seed + 1)}, {{tokens, dim}, dtype}, {},
      [](const Inputs& in, const Tensor& out) { ops::Embedding(in[0], in[1], out); }));
}

}  // namespace

METALRT_OP_CASES(embedding_cases) {
  std::vector<OpCase> cases;
  uint32_t seed = 1000;
  for (DType dtype : kAllDTypes)
    for (auto [vocab, dim, tokens] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {33, 31, 5},
                                      {49, 32, 33}, {7, 33, 32}, {300, 257, 3}})
      cases.push_back(EmbeddingCase(dtype, vocab, dim, tokens, seed += 2));
  // OPT-125m's vocabulary; a decode step (1 token) and a short prefill.
  cases.push_back(EmbeddingCase(DType::kF16, 50272, 64, 1, 1100, "opt_vocab"));
  cases.push_back(EmbeddingCase(DType::kBF16, 50272, 64, 37, 1102, "opt_vocab"));
  return cases;
}

TEST_CASE("metal embedding: an id outside the vocabulary that reaches the kernel gives a zero row") {
  // The entry point rejects such ids when it can read them, so the kernel is launched
  // directly here, as a device whose ids the host cannot read would run it.
  const Tensor weight = ToMetal(MakeFloat({3, 40}, DType::kF32, RandomValues(120, 1110, 1.0, 2.0)));
  const Tensor ids = ToMetal(MakeInts<int32_t>({4}, DType::kI32, {2, -1, 3, 0}));
  const Tensor out = PoisonedMetal({4, 40}, DType::kF32);
  gpu::KernelLaunch("embedding_gather_f32")
      .input(0, weight)
      .input(1, ids)
      .output(2, out)
      .bytes(3, EmbeddingArgs{3, 40, 0})
      .threads({40, 4, 1}, {kEmbeddingThreads, 1, 1});
  const std::vector<double> got = ReadMetal(out), w = ReadMetal(weight);
  for (int64_t j = 0; j < 40; ++j) {
    CHECK(got[j] == w[2 * 40 + j]);
    CHECK(got[40 + j] == 0.0);
    CHECK(got[80 + j] == 0.0);
    CHECK(got[120 + j] == w[j]);
  }
}

TEST_CASE("metal embedding: the entry point rejects out-of-range ids before any GPU work") {
  const Tensor weight = ToMetal(MakeFloat({5, 4}, DType::kF32, RandomValues(20, 1120)));
  const Tensor out = PoisonedMetal({2, 4}, DType::kF32);
  for (int32_t bad : {-1, 5}) {
    ResetProviderStats();
    CheckThrows<std::invalid_argument>(
        [&] { ops::Embedding(weight, ToMetal(MakeInts<int32_t>({2}, DType::kI32, {0, bad})), out); },
        "[embedding] id " + std::to_string(bad) + " at position 1 is outside the vocabulary of size 5");
    CHECK(GetProviderStats("embedding", DeviceType::kMETAL).calls == 0);
  }
  for (double v : ReadMetal(out)) CHECK(std::isnan(v));
}

TEST_CASE("metal embedding: the id check waits only for GPU work that writes the ids") {
  gpu::CommandStream& stream = gpu::ActiveMetalBackend().stream();
  const Tensor logits = ToMetal(MakeFloat({2, 6}, DType::kF32, {0, 1, 5, 2, 0, 0, 9, 0, 0, 0, 0, 1}));
  const Tensor weight = ToMetal(MakeFloat({6, 3}, DType::kF32, RandomValues(18, 1130)));
  const Tensor host_ids = ToMetal(MakeInts<int32_t>({1}, DType::kI32, {4}));
  // Ids the host wrote: checked with no commit, the gather joins the open command buffer.
  const Tensor gpu_ids = ops::GreedyArgmax(logits);
  REQUIRE(stream.open_dispatches() == 1);
  const Tensor from_host = ops::Embedding(weight, host_ids);
  CHECK(stream.open_dispatches() == 2);
  // Ids greedy_argmax writes on the GPU: the check waits for that work first.
  const Tensor from_gpu = ops::Embedding(weight, gpu_ids);
  CHECK(stream.open_dispatches() == 1);
  const std::vector<double> got = ReadMetal(from_gpu), one = ReadMetal(from_host), w = ReadMetal(weight);
  for (int64_t j = 0; j < 3; ++j) {
    CHECK(got[j] == w[2 * 3 + j]);
    CHECK(got[3 + j] == w[j]);
    CHECK(one[j] == w[4 * 3 + j]);
  }
}
