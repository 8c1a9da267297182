// Speed of the CPU backend's matmul_bt (the model runner's GEMV/GEMM on the CPU
// device) at SmolLM2-135M shapes: decode GEMVs [1, 576] x [N, 576]^T (N = 1536 FFN,
// 49152 vocabulary head) and prefill GEMMs [M, 576] x [1536, 576]^T.
//
//   cmake -S . -B build/bench -G Ninja -DMETALRT_BUILD_BENCH=ON -DMETALRT_BUILD_PYTHON=OFF
//   ninja -C build/bench cpu_matmul && ./build/bench/cpu_matmul [--repeats 7] [--json PATH]
//
// Per shape: wall time (median, min of the repeats after a warm-up call) and GFLOP/s
// (2 M N K / time), plus process CPU time per call (all threads): on a machine shared
// with other work, GFLOP per CPU-second is the fairer estimate of what the cores do.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "metalrt/ops.h"

using namespace metalrt;

namespace {

struct Shape3 {
  int64_t m, k, n;
  DType dtype;
};

struct Result {
  Shape3 s;
  double median_s, min_s, cpu_s;
  double Gflop() const { return 2.0 * s.m * s.k * s.n / 1e9; }
};

Tensor Filled(int64_t rows, int64_t cols, DType dtype, int salt) {
  Tensor t = Tensor::Empty({rows, cols}, dtype, DeviceType::kCPU);
  for (int64_t i = 0; i < t.numel(); ++i) StoreFromF32(t.data(), dtype, i, ((i + salt) % 7 - 3) * 0.125f);
  return t;
}

Result Measure(const Shape3& s, int repeats) {
  Tensor a = Filled(s.m, s.k, s.dtype, 1), b = Filled(s.n, s.k, s.dtype, 2);
  Tensor out = ops::MatmulBT(a, b);   // warm-up: pages touched, pool started
  std::vector<double> wall;
  const std::clock_t cpu0 = std::clock();
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    ops::MatmulBT(a, b, out);
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double cpu = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC / repeats;
  std::sort(wall.begin(), wall.end());
  return {s, wall[wall.size() / 2], wall.front(), cpu};
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 7;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--repeats N] [--json PATH]\n", argv[0]);
      return 2;
    }
  }
  const Shape3 shapes[] = {{1, 576, 1536, DType::kF32},    {1, 576, 49152, DType::kF32},
                           {1, 576, 49152, DType::kBF16},  {1, 576, 49152, DType::kF16},
                           {128, 576, 1536, DType::kF32},  {512, 576, 1536, DType::kF32},
                           {512, 576, 1536, DType::kBF16}};
  std::vector<Result> results;
  std::printf("%-26s %-9s %11s %11s %9s %14s\n", "matmul_bt M x K x N", "dtype", "median ms",
              "min ms", "GFLOP/s", "GFLOP/cpu-s");
  for (const Shape3& s : shapes) {
    const Result r = Measure(s, repeats);
    results.push_back(r);
    const std::string dims = std::to_string(s.m) + " x " + std::to_string(s.k) + " x " + std::to_string(s.n);
    std::printf("%-26s %-9s %11.3f %11.3f %9.2f %14.2f\n", dims.c_str(), DTypeName(s.dtype),
                r.median_s * 1e3, r.min_s * 1e3, r.Gflop() / r.median_s, r.Gflop() / r.cpu_s);
  }
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) {
      std::perror(json_path.c_str());
      return 1;
    }
    std::fprintf(f, "{\"bench\": \"cpu_matmul\", \"repeats\": %d, \"results\": [", repeats);
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::fprintf(f, "%s{\"op\": \"matmul_bt\", \"m\": %lld, \"k\": %lld, \"n\": %lld, \"dtype\": \"%s\", "
                      "\"median_s\": %.6g, \"min_s\": %.6g, \"cpu_s_per_call\": %.6g, \"gflops\": %.4g}",
                   i ? ", " : "", static_cast<long long>(r.s.m), static_cast<long long>(r.s.k),
                   static_cast<long long>(r.s.n), DTypeName(r.s.dtype), r.median_s, r.min_s, r.cpu_s,
                   r.Gflop() / r.median_s);
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
