// Speed of the CPU device's decode attention (ops::PagedAttention, one query token) at
// the default model's geometry (SmolLM2-135M: 9 heads, 3 kv heads, head_dim 64, f32
// cache in blocks of 16 positions) and a few contexts.
//
//   cmake -S . -B build/bench -G Ninja -DMETALRT_BUILD_BENCH=ON -DMETALRT_BUILD_PYTHON=OFF
//   ninja -C build/bench cpu_attention && ./build/bench/cpu_attention [--repeats 200] [--ctx N] [--only hot|decode]
//
// Each call is a replay of a recorded one-op plan, as a decode step replays its plan (no
// argument checks). Two rows per context, per-call wall time (median and min) and the
// K/V bytes read per second:
// * hot: one layer's caches called again and again (they stay in the L2 up to ~1k);
// * decode: the 30 layers' caches in turn, each round after streaming 96 MB (the
//   model's weights per token) through the caches, as a decode step leaves them; the
//   block table is a shuffled permutation, as a long-running server's is.
// Thread count: METALRT_CPU_THREADS.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "metalrt/ops.h"
#include "metalrt/plan.h"

using namespace metalrt;

namespace {

constexpr int64_t kHeads = 9, kKvHeads = 3, kHeadDim = 64, kBlock = 16, kLayers = 30;

Tensor Random(const Shape& shape, std::mt19937& rng) {
  Tensor t = Tensor::Empty(shape, DType::kF32, DeviceType::kCPU);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return t;
}

Tensor Ints(const std::vector<int32_t>& v) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(v.size())}, DType::kI32, DeviceType::kCPU);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 200;
  std::vector<int64_t> contexts = {128, 192, 1024, 4096};
  std::string only;   // "hot" or "decode": one of the two rows
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--ctx") == 0) contexts = {std::max(1, std::atoi(argv[i + 1]))};
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
  }
  std::mt19937 rng(7);
  std::vector<float> weights(96'000'000 / sizeof(float), 1.0f);
  std::printf("%-34s %10s %10s %8s\n", "paged_attention decode", "median us", "min us", "GB/s");
  for (int64_t ctx : contexts) {
    const int64_t blocks = (ctx + kBlock - 1) / kBlock;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    Tensor tables = Ints(table).Reshape({1, blocks});
    Tensor seq_lens = Ints({static_cast<int32_t>(ctx)}), starts = Ints({0, 1});
    std::vector<Tensor> keys, values, queries;
    for (int64_t l = 0; l < kLayers; ++l) {
      keys.push_back(Random({blocks, kBlock, kKvHeads, kHeadDim}, rng));
      values.push_back(Random({blocks, kBlock, kKvHeads, kHeadDim}, rng));
      queries.push_back(Random({1, kHeads, kHeadDim}, rng));
    }
    Tensor out = Tensor::Empty({1, kHeads, kHeadDim}, DType::kF32, DeviceType::kCPU);
    // One recorded plan per layer, replayed as a decode step replays its plan: the
    // provider runs without the op's argument checks.
    std::vector<std::unique_ptr<Plan>> plans;
    for (int64_t l = 0; l < kLayers; ++l) {
      plans.push_back(std::make_unique<Plan>(DeviceType::kCPU));
      plans.back()->BeginRecord();
      ops::PagedAttention(queries[l], keys[l], values[l], tables, seq_lens, starts, 0.125f, out);
      plans.back()->EndRecord();
    }
    auto call = [&](int64_t l) { plans[l]->Replay(); };
    const double bytes = 2.0 * ctx * kKvHeads * kHeadDim * sizeof(float);
    for (bool decode : {false, true}) {
      if (!only.empty() && (only == "decode") != decode) continue;
      std::vector<double> times;
      call(0);
      volatile float sink = 0;
      for (int r = 0; r < repeats; ++r) {
        if (decode && r % kLayers == 0) {
          float s = 0;
          for (size_t i = 0; i < weights.size(); i += 16) s += weights[i];
          sink = sink + s;
        }
        const int64_t l = decode ? r % kLayers : 0;
        const auto t0 = std::chrono::steady_clock::now();
        call(l);
        times.push_back(Seconds(t0, std::chrono::steady_clock::now()));
      }
      std::sort(times.begin(), times.end());
      const double median = times[times.size() / 2];
      const std::string name = "ctx " + std::to_string(ctx) + (decode ? " decode (30 layers)" : " hot");
      std::printf("%-34s %10.2f %10.2f %8.1f\n", name.c_str(), median * 1e6, times[0] * 1e6, bytes / median / 1e9);
    }
  }
  return 0;
}
