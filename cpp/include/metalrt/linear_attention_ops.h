// Op entry points of Gated-DeltaNet linear attention (Yang, Kautz & Hatamizadeh 2024,
// "Gated Delta Networks"; the layers of Qwen3-Next and Qwen3.5), as transformers 5.24
// computes them (models/qwen3_next/modeling_qwen3_next.py). Included by metalrt/ops.h;
// the conventions there hold (errors, "float", `out`).
//
// Batching (vLLM's varlen convention): the tokens of R requests are concatenated,
// T = total; query_start int32 [R + 1] (request r owns rows query_start[r] ..
// query_start[r+1] - 1, non-decreasing from 0 to T); each request's recurrent state lives
// in a pool at slot state_slots[r] (int32 [R], distinct, in [0, S)). query_start and
// state_slots are read and validated on the host when the op is called (on Metal in
// place through unified memory), so they must be written by the host.
#pragma once
#include <cstdint>
#include <tuple>

#include "metalrt/ops.h"

namespace metalrt::ops {

struct CausalConv1dParams { bool silu; };
// Causal depthwise conv1d with a carried state (Qwen3-Next's conv1d over [q | k | v];
// transformers' torch_causal_conv1d_update generalised to many tokens).
// x [T, C] float; weight [C, K] in x's dtype (nn.Conv1d's [C, 1, K] squeezed);
// conv_state [S, C, K-1] in x's dtype, updated in place. For request r, xpad is its
// K-1 state columns followed by its tokens, and
//   y[t, c] = act(sum_{j<K} weight[c, j] * xpad[t + j, c])   (f32, ascending j)
// with act = SiLU when `silu`, else identity. Afterwards slot state_slots[r] holds the
// last K-1 columns of xpad: pre-conv inputs, including older state when the request had
// fewer than K-1 tokens. A request with no token leaves its state unchanged. Returns
// y [T, C] in x's dtype; out may not overlap the inputs.
Tensor CausalConv1d(const Tensor& x, const Tensor& weight, const Tensor& conv_state,
                    const Tensor& query_start, const Tensor& state_slots, bool silu,
                    const OptTensor& out = std::nullopt);

// The gates of a GDN layer, per value head, in f32 whatever the dtypes (as transformers:
// "if the model is loaded in fp16, without the .float() here, A might be -inf"):
//   g = -exp(A_log) * softplus(a + dt_bias), softplus(x) = x > 20 ? x : log1p(exp(x))
//   beta = sigmoid(b) = 1 / (1 + exp(-b))
// a, b [T, Hv] one float dtype; A_log, dt_bias [Hv] one float dtype (f32 or a's).
// Returns (g, beta), both float32 [T, Hv].
std::tuple<Tensor, Tensor> GdnGating(const Tensor& a, const Tensor& b, const Tensor& A_log,
                                     const Tensor& dt_bias);

// How gated_delta_rule runs each request: the recurrent step per token, the chunked
// form (chunks of kDeltaRuleChunk tokens), or recurrent for one-token requests and
// chunked for longer ones (every request recurrent under DecodeRows, op_registry.h: a
// token's bits then do not depend on the tokens fed with it). The results agree to f32
// rounding.
enum class DeltaRuleMode : int32_t { kRecurrent = 0, kChunked = 1, kAuto = 2 };
constexpr int64_t kDeltaRuleChunk = 64;

struct GatedDeltaRuleParams {
  int64_t num_k_heads, head_k_dim, num_v_heads, head_v_dim;
  float scale;
  DeltaRuleMode mode;
  // The value heads' order: grouped by key head (transformers: value head h uses key
  // head h / (Hv / Hk)) or tiled (llama.cpp's qwen35 GGUF files reorder them so that
  // value head h uses key head h % Hk, ggml-org/llama.cpp#19468).
  bool v_heads_tiled = false;
};
// The gated delta rule over the batch, state carried per request (transformers'
// torch_recurrent_gated_delta_rule and torch_chunk_gated_delta_rule with
// use_qk_l2norm_in_kernel=True; the chunked form carries the state across chunks).
// mixed_qkv
// [T, 2*Hk*Dk + Hv*Dv] float (the conv output: q of every k head, then k, then v, head
// major); g, beta float32 [T, Hv] (GdnGating); state float32 [S, Hv, Dk, Dv], read as
// the initial state of each request's slot and updated in place. Hv must be a multiple
// of Hk: value head h uses key head h / (Hv / Hk), or h % Hk when v_heads_tiled. q and k are L2-normalised in f32,
// x * rsqrt(sum(x^2) + 1e-6), and q is multiplied by `scale` (usually Dk^-0.5). Per
// value head, with S in R^{Dk x Dv}, each token t does
//   S = exp(g_t) S;  S += k_t (beta_t (v_t - S^T k_t))^T;  o_t = S^T q_t
// (the chunked form is the same in exact arithmetic, another order of f32 operations:
// cpp/cpu/gated_delta_rule_chunked.cpp). Returns o [T, Hv, Dv] in mixed_qkv's dtype.
Tensor GatedDeltaRule(const Tensor& mixed_qkv, const Tensor& g, const Tensor& beta,
                      const Tensor& state, const Tensor& query_start, const Tensor& state_slots,
                      const GatedDeltaRuleParams& params, const OptTensor& out = std::nullopt);

}  // namespace metalrt::ops
