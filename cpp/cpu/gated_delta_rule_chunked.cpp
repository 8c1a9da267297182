// The chunked form of the CPU gated delta rule oracle, a second algorithm computed as
// transformers' torch_chunk_gated_delta_rule does (the UT transform of DeltaNet, Yang et
// al. 2024), chunk by chunk of C = kDeltaRuleChunk rows, the state S carried between
// chunks. Within a chunk of n <= C rows (a short last chunk is HF's zero padding, whose
// g = beta = 0 neither decay nor write the state), with G the cumulative sum of g:
//   P[i][j] = exp(G_i - G_j) for j <= i, 0 above the diagonal (the difference form:
//             exp(G_i) / exp(G_j) would be 0/0 for fast-decaying heads)
//   A[i][j] = beta_i (k_i . k_j) P[i][j] for j < i
//   U = (I + A)^-1 (beta v),  W = (I + A)^-1 (beta k exp(G))   (unit-lower-triangular
//       solves by forward substitution: row i minus A[i][j] times the solved rows j < i)
//   v_new = U - W S
//   o_i = exp(G_i) q_i^T S + sum_{j <= i} (q_i . k_j) P[i][j] v_new_j
//   S = exp(G_last) S + sum_i exp(G_last - G_i) k_i v_new_i^T
// Every sum runs over its index ascending, in f32.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/gated_delta_rule.h"
#include "metalrt/linear_attention_ops.h"

namespace metalrt::cpu {
namespace {

float Dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// rows[i] -= sum_{j < i} A[i][j] rows[j] for i ascending: solves (I + A) X = rows in
// place, A strictly lower triangular [n][C], rows [n][width].
void SolveUnitLower(const std::vector<float>& a, int64_t n, int64_t width, float* rows) {
  constexpr int64_t kC = ops::kDeltaRuleChunk;
  for (int64_t i = 1; i < n; ++i)
    for (int64_t e = 0; e < width; ++e) {
      float acc = 0.0f;
      for (int64_t j = 0; j < i; ++j) acc += a[i * kC + j] * rows[j * width + e];
      rows[i * width + e] -= acc;
    }
}

}  // namespace

void ChunkedDeltaRule(const DeltaRuleRows& rows, float* state, float* o) {
  constexpr int64_t kC = ops::kDeltaRuleChunk;
  const int64_t dk = rows.dk, dv = rows.dv;
  std::vector<float> cum(kC), decay(kC * kC), a(kC * kC), u(kC * dv), w(kC * dk), v_new(kC * dv),
      next(static_cast<size_t>(dk * dv));
  for (int64_t c0 = 0; c0 < rows.len; c0 += kC) {
    const int64_t n = std::min(kC, rows.len - c0);
    const float* q = &rows.q[c0 * dk];
    const float* k = &rows.k[c0 * dk];
    const float* v = &rows.v[c0 * dv];
    const float* beta = &rows.beta[c0];
    float running = 0.0f;
    for (int64_t i = 0; i < n; ++i) cum[i] = running += rows.g[c0 + i];
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) decay[i * kC + j] = std::exp(cum[i] - cum[j]);
    // A, U = beta v and W = beta k exp(G) before the solves.
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < i; ++j)
        a[i * kC + j] = beta[i] * Dot(&k[i * dk], &k[j * dk], dk) * decay[i * kC + j];
      for (int64_t e = 0; e < dv; ++e) u[i * dv + e] = v[i * dv + e] * beta[i];
      const float scale = beta[i] * std::exp(cum[i]);
      for (int64_t e = 0; e < dk; ++e) w[i * dk + e] = k[i * dk + e] * scale;
    }
    SolveUnitLower(a, n, dv, u.data());
    SolveUnitLower(a, n, dk, w.data());
    // v_new = U - W S; o = exp(G) q S (the state before the chunk) + intra-chunk part.
    for (int64_t i = 0; i < n; ++i) {
      const float g_i = std::exp(cum[i]);
      for (int64_t d = 0; d < dv; ++d) {
        float ws = 0.0f, qs = 0.0f;
        for (int64_t e = 0; e < dk; ++e) {
          ws += w[i * dk + e] * state[e * dv + d];
          qs += q[i * dk + e] * g_i * state[e * dv + d];
        }
        v_new[i * dv + d] = u[i * dv + d] - ws;
        o[(c0 + i) * dv + d] = qs;
      }
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        const float attn = Dot(&q[i * dk], &k[j * dk], dk) * decay[i * kC + j];
        for (int64_t d = 0; d < dv; ++d) o[(c0 + i) * dv + d] += attn * v_new[j * dv + d];
      }
    const float last = cum[n - 1], chunk_decay = std::exp(last);
    float* k_end = w.data();   // the keys decayed to the chunk's end, in W's spent storage
    for (int64_t i = 0; i < n; ++i) {
      const float to_end = std::exp(last - cum[i]);
      for (int64_t e = 0; e < dk; ++e) k_end[i * dk + e] = k[i * dk + e] * to_end;
    }
    for (int64_t e = 0; e < dk; ++e)
      for (int64_t d = 0; d < dv; ++d) {
        float acc = 0.0f;
        for (int64_t i = 0; i < n; ++i) acc += k_end[i * dk + e] * v_new[i * dv + d];
        next[e * dv + d] = state[e * dv + d] * chunk_decay + acc;
      }
    std::copy(next.begin(), next.end(), state);
  }
}

}  // namespace metalrt::cpu
