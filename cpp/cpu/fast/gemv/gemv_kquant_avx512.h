// Decode's m = 1 GEMV against the K-quants Q4_K, Q5_K and Q6_K on AVX-512 VNNI
// (gemv_kquant_avx512.cpp, compiled with the same flags as gemv_avx512_vnni.cpp, which
// calls it): x86-64 only, callable only where SelectedGemvIsa() is avx512_vnni.
#pragma once
#include <cstdint>

#include "cpu/fast/gemv/gemv_args.h"

namespace metalrt::cpu::fast {

// out[j] = sum over k of x[k] * w[j, k] for weight rows j in [begin, end); args.m == 1
// and args.format one of kQ4_K, kQ5_K, kQ6_K (others are not read).
void GemvRowsKQuantM1Avx512(const GemvArgs& args, int64_t begin, int64_t end);

}  // namespace metalrt::cpu::fast
