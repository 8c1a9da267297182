// The inner loops of the fast CPU decode attention, one set per instruction set
// (attention_tile.h holds their one source; attention_<isa>.cpp instantiate it with
// their own target flags). Chosen at run time by SelectedAttentionKernels(), from the
// same CPU check as the quantized GEMV (cpu_features.h, METALRT_CPU_ISA).
#pragma once
#include <cstdint>

namespace metalrt::cpu::fast {

// One GQA group against a run of cached rows.
struct AttentionTileArgs {
  const float* q;      // [group][head_dim] f32, the group's query heads
  int64_t group, head_dim;
  int64_t kv_stride;   // floats from one cached row (key or value) of the run to the next
  int64_t s_stride;    // floats from one head's scores/weights to the next
  float scale;         // applied to each dot after the sum, as the oracle does
};

struct AttentionKernels {
  // s[h * s_stride + j] = scale * (q[h] . k_j) for the `count` rows k_j of the run.
  void (*scores)(const AttentionTileArgs& a, const float* k, int64_t count, float* s);
  // o[h][0, head_dim) += sum over j ascending of w[h * s_stride + j] * v_j.
  void (*accumulate)(const AttentionTileArgs& a, const float* w, const float* v, int64_t count, float* o);
  // s[0, n) <- exp(s_j - m), m = max_j s_j, returned; *l = their sum (in lane order, not
  // ascending j). s has room for cap >= n floats, cap a multiple of 16, the tail
  // overwritten. exp within 2 ulp of expf (Cephes' polynomial, attention_tile.h).
  float (*softmax)(float* s, int64_t n, int64_t cap, float* l);
};

AttentionKernels AttentionKernelsPortable();
#if defined(__x86_64__)
AttentionKernels AttentionKernelsAvx2();
AttentionKernels AttentionKernelsAvx512();
#endif

// The best set this CPU runs (SelectedGemvIsa(): AVX-512 F where it allows the
// 512-bit GEMV, AVX2 + FMA, else portable C++, which NEON targets vectorise).
AttentionKernels SelectedAttentionKernels();

}  // namespace metalrt::cpu::fast
