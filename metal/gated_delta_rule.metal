// gated_delta_rule: the gated delta rule per (request, value head), the state carried in
// the pool (the CPU oracle cpp/cpu/gated_delta_rule.cpp and gated_delta_rule_chunked.cpp
// is the spec). q and k are L2-normalised in f32 (x / sqrt(sum x^2 + 1e-6)), q times the
// scale; value head h reads key head delta_rule_key_head(h) (linear_attention_args.h).
// One threadgroup of kDeltaThreads per (request, value head); thread d owns value column
// d of the head's state S [Dk][Dv] (the delta rule never mixes columns), the other
// threads help stage.
// * gated_delta_rule_recurrent_<dtype>: the step per token (decode). The column's Dk
//   entries stay in registers across the request's tokens (Dk is function constant
//   head_k_dim, so the loops over them unroll), so the state is read and written once
//   per call: per token S = exp(g) S, m = S^T k, S += k beta (v - m),
//   o = S^T q, with q and k staged normalised in threadgroup memory.
// * gated_delta_rule_chunked_<dtype>: chunks of kDeltaChunk tokens (prefill), the state
//   in device memory between chunks. Per chunk of n rows (G = cumulative g,
//   P[i][j] = exp(G_i - G_j) for j <= i, always <= 1):
//   1. the chunk's matrix in threadgroup memory: on and below the diagonal
//      (q_i . k_j) P[i][j], above it (transposed) the UT system beta_i (k_i . k_j) P[i][j],
//      with q and k staged kDeltaKeySlice features at a time; in the same pass each column
//      thread reads S once and forms (k_i . S_d) and (q_i . S_d) for every row;
//   2. v_new = (I + A)^-1 beta (v - exp(G) k S) by forward substitution (the oracle's
//      U - W S, with the solve applied once after subtracting: it is linear);
//   3. o_i = exp(G_i) q_i . S + sum_{j <= i} M[i][j] v_new_j;
//   4. S = exp(G_last) S + sum_i exp(G_last - G_i) k_i v_new_i^T, k restaged.
// Which kernel serves which request is args.mode: all one (recurrent, chunked), or auto
// (recurrent for one-token requests, chunked otherwise); a threadgroup of a request the
// kernel does not serve returns at once.
#include <metal_stdlib>
#include "linear_attention_args.h"
using namespace metal;

// The chunked kernel's row scalars take threads 0..63 for q and 64..127 for k; the
// recurrent kernel stages q[d] and k[d] by thread d < Dk.
static_assert(kDeltaThreads >= 2 * kDeltaChunk, "a thread per chunk row for q and for k");
static_assert(kDeltaThreads >= kDeltaMaxHeadDim, "a thread per key feature");
// Both kernels run threadgroups of exactly kDeltaThreads, declared to the compiler
// ([[max_total_threads_per_threadgroup]]) so it budgets registers for that size.
static_assert(kDeltaThreads == 128, "the kernels' max_total_threads_per_threadgroup");

static_assert(kDeltaHeadKDimConstant == 0, "head_k_dim is function constant 0");
constant int head_k_dim [[function_constant(0)]];

// Whether this kernel serves a request of `len` tokens (never an empty one).
inline bool serves(int32_t len, int32_t mode, bool chunked) {
  if (len == 0) return false;
  if (mode == 2) return chunked ? len > 1 : len == 1;
  return chunked ? mode == 1 : mode == 0;
}

// 1 / sqrt(sum over this thread's row of x^2 + 1e-6), the row read from device memory.
template <typename T>
inline float inverse_norm(device const T* row, int32_t n) {
  float ss = 0.0f;
  for (int32_t i = 0; i < n; ++i) {
    const float v = float(row[i]);
    ss += v * v;
  }
  return 1.0f / sqrt(ss + 1e-6f);
}

// Grid: (requests, Hv) threadgroups of kDeltaThreads.
template <typename T>
[[max_total_threads_per_threadgroup(128)]]
kernel void gated_delta_rule_recurrent(device const T* qkv [[buffer(0)]],
                                       device const float* g [[buffer(1)]],
                                       device const float* beta [[buffer(2)]],
                                       device float* state [[buffer(3)]],
                                       device const int32_t* query_start [[buffer(4)]],
                                       device const int32_t* state_slots [[buffer(5)]],
                                       device T* out [[buffer(6)]],
                                       constant GatedDeltaRuleArgs& args [[buffer(7)]],
                                       uint2 group [[threadgroup_position_in_grid]],
                                       uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float q_s[kDeltaMaxHeadDim];
  threadgroup float k_s[kDeltaMaxHeadDim];
  threadgroup float inv_norm[2];
  const int32_t r = int32_t(group.x), h = int32_t(group.y);
  const int32_t first = query_start[r], len = query_start[r + 1] - first;
  if (!serves(len, args.mode, false)) return;
  const int32_t dk = head_k_dim, dv = args.head_v_dim, hv = args.num_v_heads;
  const int32_t kh = delta_rule_key_head(h, args.num_k_heads, hv, args.v_heads_tiled != 0);
  const long width = 2L * args.num_k_heads * dk + long(hv) * dv;
  const int32_t d = int32_t(tid);
  const bool column = d < dv;
  device float* s_col = state + (long(state_slots[r]) * hv + h) * dk * dv + d;
  float s[kDeltaMaxHeadDim];
  if (column)
    for (int32_t i = 0; i < dk; ++i) s[i] = s_col[long(i) * dv];
  for (int32_t t = 0; t < len; ++t) {
    device const T* row = qkv + long(first + t) * width;
    device const T* q = row + long(kh) * dk;
    device const T* k = row + long(args.num_k_heads + kh) * dk;
    if (tid < 2) inv_norm[tid] = inverse_norm(tid == 0 ? q : k, dk);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (d < dk) {
      q_s[d] = float(q[d]) * inv_norm[0] * args.scale;
      k_s[d] = float(k[d]) * inv_norm[1];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (column) {
      const long gate = long(first + t) * hv + h;
      const float decay = exp(g[gate]);
      float m = 0.0f;
      for (int32_t i = 0; i < dk; ++i) {
        s[i] *= decay;
        m += s[i] * k_s[i];
      }
      const float delta = (float(row[2L * args.num_k_heads * dk + long(h) * dv + d]) - m) * beta[gate];
      float o = 0.0f;
      for (int32_t i = 0; i < dk; ++i) {
        s[i] += k_s[i] * delta;
        o += s[i] * q_s[i];
      }
      out[(long(first + t) * hv + h) * dv + d] = T(o);
    }
    // The next token restages q_s, k_s and inv_norm.
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (column)
    for (int32_t i = 0; i < dk; ++i) s_col[long(i) * dv] = s[i];
}

// Grid: (requests, Hv) threadgroups of kDeltaThreads.
template <typename T>
[[max_total_threads_per_threadgroup(128)]]
kernel void gated_delta_rule_chunked(device const T* qkv [[buffer(0)]],
                                     device const float* g [[buffer(1)]],
                                     device const float* beta [[buffer(2)]],
                                     device float* state [[buffer(3)]],
                                     device const int32_t* query_start [[buffer(4)]],
                                     device const int32_t* state_slots [[buffer(5)]],
                                     device T* out [[buffer(6)]],
                                     constant GatedDeltaRuleArgs& args [[buffer(7)]],
                                     uint2 group [[threadgroup_position_in_grid]],
                                     uint tid [[thread_index_in_threadgroup]]) {
  // m[i][j]: (q_i . k_j) P[i][j] for j <= i; m[j][i]: beta_i (k_i . k_j) P[i][j] for j < i.
  threadgroup float m[kDeltaChunk * kDeltaChunk];
  threadgroup float q_slice[kDeltaChunk * kDeltaKeySlice];
  threadgroup float k_slice[kDeltaChunk * kDeltaKeySlice];
  threadgroup float cum[kDeltaChunk];      // G, the cumulative g within the chunk
  threadgroup float beta_s[kDeltaChunk];
  threadgroup float q_inv[kDeltaChunk];    // q's inverse norm times the scale
  threadgroup float k_inv[kDeltaChunk];
  const int32_t r = int32_t(group.x), h = int32_t(group.y);
  const int32_t first = query_start[r], len = query_start[r + 1] - first;
  if (!serves(len, args.mode, true)) return;
  const int32_t dk = head_k_dim, dv = args.head_v_dim, hv = args.num_v_heads;
  const int32_t kh = delta_rule_key_head(h, args.num_k_heads, hv, args.v_heads_tiled != 0);
  const long width = 2L * args.num_k_heads * dk + long(hv) * dv;
  const int32_t d = int32_t(tid);
  const bool column = d < dv;
  device float* s_col = state + (long(state_slots[r]) * hv + h) * dk * dv + d;
  const long q_offset = long(kh) * dk, k_offset = long(args.num_k_heads + kh) * dk;
  const long v_offset = 2L * args.num_k_heads * dk + long(h) * dv + d;
  for (int32_t c0 = 0; c0 < len; c0 += kDeltaChunk) {
    const int32_t n = min(kDeltaChunk, len - c0);
    device const T* rows = qkv + long(first + c0) * width;
    // Per-row scalars: thread i < 64 for q, 64 + i for k (norms read from device memory).
    const int32_t i_row = int32_t(tid) % kDeltaChunk;
    if (i_row < n) {
      if (int32_t(tid) < kDeltaChunk) {
        q_inv[i_row] = inverse_norm(rows + i_row * width + q_offset, dk) * args.scale;
        const long gate = long(first + c0 + i_row) * hv + h;
        beta_s[i_row] = beta[gate];
        float running = 0.0f;   // ascending from the chunk start, as the oracle's cumsum
        for (int32_t t = 0; t <= i_row; ++t) running += g[long(first + c0 + t) * hv + h];
        cum[i_row] = running;
      } else {
        k_inv[i_row] = inverse_norm(rows + i_row * width + k_offset, dk);
      }
    }
    for (int32_t p = int32_t(tid); p < kDeltaChunk * kDeltaChunk; p += kDeltaThreads) m[p] = 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // 1. The chunk matrix and each row's products with the state column.
    // ks and qs are indexed only by loops of kDeltaChunk iterations (the rows past n
    // skipped, or adding the zeros staged for them), so they unroll into registers.
    float ks[kDeltaChunk], qs[kDeltaChunk];   // k_i . S_d, q_i . S_d (the chunk-start state)
    for (int32_t i = 0; i < kDeltaChunk; ++i) ks[i] = qs[i] = 0.0f;
    for (int32_t e0 = 0; e0 < dk; e0 += kDeltaKeySlice) {
      const int32_t width_e = min(kDeltaKeySlice, dk - e0);
      for (int32_t p = int32_t(tid); p < kDeltaChunk * kDeltaKeySlice; p += kDeltaThreads) {
        const int32_t i = p / kDeltaKeySlice, e = p % kDeltaKeySlice;
        const bool live = i < n && e < width_e;
        q_slice[p] = live ? float(rows[i * width + q_offset + e0 + e]) * q_inv[i] : 0.0f;
        k_slice[p] = live ? float(rows[i * width + k_offset + e0 + e]) * k_inv[i] : 0.0f;
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
      for (int32_t p = int32_t(tid); p < kDeltaChunk * kDeltaChunk; p += kDeltaThreads) {
        const int32_t i = p / kDeltaChunk, j = p % kDeltaChunk;
        if (j > i || i >= n) continue;
        float qk = 0.0f, kk = 0.0f;
        for (int32_t e = 0; e < width_e; ++e) {
          qk += q_slice[i * kDeltaKeySlice + e] * k_slice[j * kDeltaKeySlice + e];
          kk += k_slice[i * kDeltaKeySlice + e] * k_slice[j * kDeltaKeySlice + e];
        }
        m[i * kDeltaChunk + j] += qk;
        if (j < i) m[j * kDeltaChunk + i] += kk;
      }
      if (column)
        for (int32_t e = 0; e < width_e; ++e) {
          const float s = s_col[long(e0 + e) * dv];
          for (int32_t i = 0; i < kDeltaChunk; ++i) {   // rows past n staged as 0
            ks[i] += k_slice[i * kDeltaKeySlice + e] * s;
            qs[i] += q_slice[i * kDeltaKeySlice + e] * s;
          }
        }
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    // The decays (and beta for the UT system), each thread on the pairs it summed.
    for (int32_t p = int32_t(tid); p < kDeltaChunk * kDeltaChunk; p += kDeltaThreads) {
      const int32_t i = p / kDeltaChunk, j = p % kDeltaChunk;
      if (j > i || i >= n) continue;
      const float decay = exp(cum[i] - cum[j]);
      m[i * kDeltaChunk + j] *= decay;
      if (j < i) m[j * kDeltaChunk + i] *= beta_s[i] * decay;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    if (column) {
      // 2. v_new in place of ks, row by row (forward substitution).
      for (int32_t i = 0; i < kDeltaChunk; ++i) {
        if (i >= n) continue;   // ks[i] stays 0
        const float v = float(rows[i * width + v_offset]);
        float acc = 0.0f;
        for (int32_t j = 0; j < i; ++j) acc += m[j * kDeltaChunk + i] * ks[j];
        ks[i] = beta_s[i] * (v - exp(cum[i]) * ks[i]) - acc;
      }
      // 3. The outputs.
      for (int32_t i = 0; i < kDeltaChunk; ++i) {
        if (i >= n) continue;
        float o = exp(cum[i]) * qs[i];
        for (int32_t j = 0; j <= i; ++j) o += m[i * kDeltaChunk + j] * ks[j];
        out[(long(first + c0 + i) * hv + h) * dv + d] = T(o);
      }
    }
    // 4. The state, with k restaged decayed to the chunk's end.
    const float last = cum[n - 1];
    for (int32_t e0 = 0; e0 < dk; e0 += kDeltaKeySlice) {
      const int32_t width_e = min(kDeltaKeySlice, dk - e0);
      for (int32_t p = int32_t(tid); p < kDeltaChunk * kDeltaKeySlice; p += kDeltaThreads) {
        const int32_t i = p / kDeltaKeySlice, e = p % kDeltaKeySlice;
        k_slice[p] = i < n && e < width_e
                         ? float(rows[i * width + k_offset + e0 + e]) * k_inv[i] * exp(last - cum[i])
                         : 0.0f;
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
      if (column)
        for (int32_t e = 0; e < width_e; ++e) {
          float acc = 0.0f;
          // Rows past n add 0 * 0.
          for (int32_t i = 0; i < kDeltaChunk; ++i) acc += k_slice[i * kDeltaKeySlice + e] * ks[i];
          device float* s = s_col + long(e0 + e) * dv;
          *s = *s * exp(last) + acc;
        }
      // The next slice (or chunk) restages k_slice and rewrites the per-row scalars.
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
  }
}

#define METALRT_GATED_DELTA_RULE(T, SUFFIX)                                                   \
  template [[host_name("gated_delta_rule_recurrent_" #SUFFIX)]] kernel void                  \
  gated_delta_rule_recurrent<T>(device const T*, device const float*, device const float*,    \
                                device float*, device const int32_t*, device const int32_t*, \
                                device T*, constant GatedDeltaRuleArgs&, uint2, uint);       \
  template [[host_name("gated_delta_rule_chunked_" #SUFFIX)]] kernel void                    \
  gated_delta_rule_chunked<T>(device const T*, device const float*, device const float*,      \
                              device float*, device const int32_t*, device const int32_t*,   \
                              device T*, constant GatedDeltaRuleArgs&, uint2, uint);

METALRT_GATED_DELTA_RULE(float, f32)
METALRT_GATED_DELTA_RULE(half, f16)
METALRT_GATED_DELTA_RULE(bfloat, bf16)
