// Op entry points. Each validates its arguments (shapes, dtypes, devices), allocates
// the outputs that were not supplied, and runs the op through the registry on the
// device of its inputs. Errors: std::invalid_argument for shapes/values/devices
// ("[op] ..."), metalrt::TypeError for dtypes. All tensors of one call must be on
// one device. "float" below means f32, f16 or bf16; computation is in f32 and the
// output has the input's dtype unless stated. An optional `out` must have exactly
// the output's shape, dtype and device; it may not overlap the inputs unless stated.
#pragma once
#include <optional>
#include <tuple>

#include "metalrt/quantized.h"
#include "metalrt/tensor.h"
#include "metalrt/moe_ops.h"   // the MoE and gate ops (issue #15)

namespace metalrt::ops {

using OptTensor = std::optional<Tensor>;

// ---- elementwise -------------------------------------------------------------
// Results are rounded once to the output dtype, to nearest even.
// a + b, a * b. b has a's shape or is a trailing suffix of it (broadcast over the
// leading dims, e.g. a bias [N] added to [T, N]). Same float dtype. out may be a.
Tensor Add(const Tensor& a, const Tensor& b, const OptTensor& out = std::nullopt);
Tensor Mul(const Tensor& a, const Tensor& b, const OptTensor& out = std::nullopt);
// ReLU (Nair & Hinton 2010): max(x, 0).
Tensor Relu(const Tensor& x, const OptTensor& out = std::nullopt);
// GELU (Hendrycks & Gimpel 2016), tanh approximation:
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Tensor Gelu(const Tensor& x, const OptTensor& out = std::nullopt);
// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"): x [..., 2n] ->
// silu(x[..., :n]) * x[..., n:] -> [..., n], silu(g) = g / (1 + exp(-g)).
Tensor SiluAndMul(const Tensor& x, const OptTensor& out = std::nullopt);
// Converts between any two dtypes (floats round to nearest even, IEEE 754
// roundTiesToEven; float -> int
// truncates toward zero; out-of-range is unspecified but never UB).
Tensor Cast(const Tensor& x, DType dtype, const OptTensor& out = std::nullopt);

// ---- normalisation ------------------------------------------------------------
struct NormParams { float eps; };
// LayerNorm (Ba, Kiros & Hinton 2016) over the last dim:
// (x - mean) / sqrt(var + eps) * weight + bias.
// weight [N], bias [N] or undefined Tensor(). Biased variance (divides by N).
Tensor LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                 const OptTensor& out = std::nullopt);
// RMSNorm (Zhang & Sennrich 2019) over the last dim: x / sqrt(mean(x^2) + eps) * weight.
// A family whose norm scales by (1 + w) (Gemma, the Qwen3-Next hybrids) adds the 1 to w
// at load, as llama.cpp's converter and mlx-lm do (python/metalrt/models/norms.py).
Tensor RmsNorm(const Tensor& x, const Tensor& weight, float eps, const OptTensor& out = std::nullopt);
// Softmax over the last dim, max-subtracted: exp(x - max) / sum(exp(x - max)).
Tensor Softmax(const Tensor& x, const OptTensor& out = std::nullopt);

// ---- matrix products --------------------------------------------------------------
// a [M, K] . b [K, N] -> [M, N]. a and b the same float dtype.
Tensor Matmul(const Tensor& a, const Tensor& b, const OptTensor& out = std::nullopt);
// a [M, K] . b[N, K]^T -> [M, N] (b is a weight matrix in nn.Linear layout
// [out_features, in_features]: y = x W^T, as torch.nn.functional.linear).
Tensor MatmulBT(const Tensor& a, const Tensor& b, const OptTensor& out = std::nullopt);

// ---- quantized weights (metalrt/quantized.h) -----------------------------------------
// w [N, K] (any QuantFormat) -> [N, K] float `dtype`: every weight in f32 exactly as
// gguf.quants.dequantize (GGUF) or scale * q + bias (MLX affine) computes it, then
// rounded to `dtype`.
Tensor Dequantize(const QuantizedTensor& w, DType dtype = DType::kF32,
                  const OptTensor& out = std::nullopt);
// x [M, K] float . dequantize(w)^T -> [M, N] in x's dtype (nn.Linear with a quantized
// weight), accumulated in f32 without a float copy of w.
Tensor QuantizedMatmulBT(const Tensor& x, const QuantizedTensor& w,
                         const OptTensor& out = std::nullopt);
// ids int32 [T] -> [T, K] float `dtype`: row ids[t] of dequantize(w), dequantizing only
// the rows asked for. Ids outside [0, N) as Embedding: rejected where the host can read
// them, else a zero row.
Tensor QuantizedEmbedding(const Tensor& ids, const QuantizedTensor& w, DType dtype = DType::kF32,
                          const OptTensor& out = std::nullopt);

// Fused decode-layer GEMVs (metal/quantized.metal's epilogues; the composition of the
// two ops they replace is their oracle and their CPU provider):
// residual [M, N] + x [M, K] . dequantize(w)^T -> [M, N] in x's dtype, the product
// rounded to x's dtype first (QuantizedMatmulBT then Add); `out` may be `residual`.
Tensor QuantizedMatmulBTAdd(const Tensor& x, const QuantizedTensor& w, const Tensor& residual,
                            const OptTensor& out = std::nullopt);
// SwiGLU of a merged gate|up weight w [2 I, K] (gate rows, then up rows): x [M, K] ->
// [M, I] = silu(x . w_gate^T) * (x . w_up^T) (QuantizedMatmulBT then SiluAndMul: the
// silu in f32 of the projections rounded to x's dtype).
Tensor QuantizedMatmulBTSwiglu(const Tensor& x, const QuantizedTensor& w,
                               const OptTensor& out = std::nullopt);
// x [M, K] . [w_0 | w_1 | ...]^T -> [M, N_0 + N_1 + ...]: the outputs of 2 or 3
// weights of one format (GGUF type, or MLX affine bits, group size and scales dtype)
// and K concatenated along N (a GGUF's separate Q, K and V in one GEMV, the weights
// not copied), each exactly QuantizedMatmulBT(x, w_j) in its column slice.
Tensor QuantizedMatmulBTConcat(const Tensor& x, const std::vector<QuantizedTensor>& weights,
                               const OptTensor& out = std::nullopt);
// Whether QuantizedMatmulBTConcat of x [M, K] runs as one fused GEMV on x's device: M is
// at most the rows that device's quantized GEMV serves (its backend registers them with
// QuantizedGemvRowsRegistrar; none registered: false). Above them the op is its
// composition, each product joined on the host, which a caller with separate
// projections does better without.
bool QuantizedConcatIsOneGemv(const Tensor& x);
struct QuantizedGemvRowsRegistrar {
  QuantizedGemvRowsRegistrar(DeviceType device, int64_t max_rows);
};

// Whether the CPU counts a weight as coarse: quantized, or bfloat16. Its own rounding
// error is then at least bf16's, so the CPU's prefill GEMM may round operands to bf16
// (cpu/fast/prefill/prefill_gemm.h); a model asks it of its q/k/v weights for PagedAttention's
// coarse_projections.
inline bool IsCoarseWeight(const Tensor& weight) { return weight.dtype() == DType::kBF16; }
inline bool IsCoarseWeight(const QuantizedTensor&) { return true; }

// The decode layer's QKV split, RoPE (Su et al. 2021) of q and k and KV-cache write
// (vLLM's reshape_and_cache) in one op: qkv
// [T, (heads + 2 kv_heads) head_dim] (q | k | v, kv_heads from the caches
// [num_blocks, block_size, kv_heads, *] of any KvType, as ReshapeAndCache's) -> q [T, heads, head_dim]
// rotated; k rotated and v written to the caches at slot_mapping int64 [T] (slot < 0
// skipped). Exactly QkvSplit, RopeNeox / RopeInterleaved of q and k, ReshapeAndCache
// (its CPU provider is that composition).
struct QkvRopeCacheParams { int64_t heads, rotary_dim; float base; bool neox; };
Tensor QkvRopeCache(const Tensor& qkv, const Tensor& positions, const Tensor& key_cache,
                    const Tensor& value_cache, const Tensor& slot_mapping, int64_t heads,
                    int64_t rotary_dim, float base, bool neox = true,
                    const OptTensor& out = std::nullopt);

// ---- gathers and layout -----------------------------------------------------------
// Exact copies of elements: bit-exact on every device.
// weight [V, D] any dtype, ids int32 [T] -> [T, D] with out[t] = weight[ids[t]].
// Ids outside [0, V) raise std::invalid_argument, checked wherever the host can read
// the ids (CPU, unified memory); one that reaches a kernel anyway gives a zero row.
Tensor Embedding(const Tensor& weight, const Tensor& ids, const OptTensor& out = std::nullopt);
// qkv [T, q + k + v] -> (q [T, q], k [T, k], v [T, v]) as new contiguous tensors.
struct QkvSplitParams { int64_t q_width, k_width, v_width; };
std::tuple<Tensor, Tensor, Tensor> QkvSplit(const Tensor& qkv, int64_t q_width,
                                            int64_t k_width, int64_t v_width);
// Paged KV-cache write (vLLM's reshape_and_cache; PagedAttention: Kwon et al. 2023,
// "Efficient Memory Management for Large Language Model Serving with PagedAttention").
// key/value [T, kv_heads, head_dim];
// key_cache/value_cache [num_blocks, block_size, kv_heads, head_dim] of key's dtype
// (a bit-exact copy, any dtype), or, for float rows, caches of any KvType
// (metalrt/kv_type.h), each side its own: another float dtype (rounded), q8_0 / q4_0
// (uint8 rows of blocks, quantized as GGML's reference quantizers, cpu/kv_blocks.h);
// slot_mapping int64 [T]: token t goes to block slot/block_size,
// row slot % block_size; slot < 0 is skipped (padding). Writes the caches in place.
// A slot beyond the cache raises std::invalid_argument, checked wherever the host can
// read slot_mapping; one that reaches a kernel anyway is skipped.
void ReshapeAndCache(const Tensor& key, const Tensor& value, const Tensor& key_cache,
                     const Tensor& value_cache, const Tensor& slot_mapping);

// ---- attention ---------------------------------------------------------------------
// A provider's OpCall holds query, key_cache, value_cache, block_tables, seq_lens,
// query_start_loc, then sinks when given (inputs.size() == 7).
struct PagedAttentionParams {
  float scale;
  bool coarse_projections;
  int64_t window;   // 0: full causal attention
};
// Variable-length causal paged attention with grouped-query heads (PagedAttention:
// Kwon et al. 2023, vLLM; GQA: Ainslie et al. 2023).
// query [T, heads, head_dim] (T = all query tokens of the batch, request b owning
// rows query_start_loc[b] .. query_start_loc[b+1]); key_cache/value_cache
// [num_blocks, block_size, kv_heads, *] of any KvType each (metalrt/kv_type.h: a float
// dtype, or q8_0 / q4_0 blocks, dequantized as they are read); block_tables int32
// [B, max_blocks_per_seq]; seq_lens int32 [B] (context length including the
// queries); query_start_loc int32 [B + 1]. Query i of request b sits at position
// seq_lens[b] - q_len_b + i and attends to positions 0..that position. heads must
// be a multiple of kv_heads (head h reads kv head h / (heads / kv_heads)).
// softmax(scale * q.k) in f32 (scale usually head_dim^-0.5). Returns [T, heads,
// head_dim] in query's dtype.
// window > 0 (sliding-window attention, Mistral / Gemma 2-3 / gpt-oss): the query at
// position p attends only to positions p - window + 1 .. p (transformers'
// sliding_window_overlay, kv_idx > q_idx - window; llama.cpp's n_swa); positions before
// that are skipped, never read, and the block-table entries that hold only such positions
// (before the window of a request's first query) are not checked, so a cache may have
// freed those blocks. window 0 is full causal attention; window < 0 is a ValueError.
// sinks, float32 [heads] on query's device (attention sinks as gpt-oss defines them in
// transformers' GptOssAttention): a learned logit per query head that joins the softmax's
// denominator only, unscaled and after the masked scores: with M = max(max_j s_j,
// sink_h), out = (sum_j e^(s_j - M) v_j) / (sum_j e^(s_j - M) + e^(sink_h - M)).
// The batch description (block_tables, seq_lens,
// query_start_loc) is read and validated on the host when the op is called — on Metal
// in place through unified memory, without a synchronize — so it must be written by the
// host, not by pending GPU work. coarse_projections: q, k and v are projections by
// quantized or bf16 weights; the CPU then runs a prefill's Q.K^T and W.V on its bf16
// GEMM (q, k, the softmax weights W and v rounded to bf16, f32 sums, as torch's bf16
// SDPA) wherever it runs such weights' GEMMs on it (PrefillGemmIsBf16(true),
// cpu/fast/prefill/prefill_gemm.h: by default on CPUs with AVX-512 BF16); false, only where
// every weight's is (METALRT_CPU_GEMM=bf16). Decode batches (the tokens the CPU's f32
// GEMV serves) and other devices ignore it.
Tensor PagedAttention(const Tensor& query, const Tensor& key_cache, const Tensor& value_cache,
                      const Tensor& block_tables, const Tensor& seq_lens,
                      const Tensor& query_start_loc, float scale,
                      const OptTensor& out = std::nullopt, bool coarse_projections = false,
                      int64_t window = 0, const OptTensor& sinks = std::nullopt);

// ---- selection ---------------------------------------------------------------------
// logits [R, V] float -> int32 [R]: index of the max per row; ties go to the lowest
// index (numpy.argmax's rule); NaN never wins (a row of only NaN gives 0).
Tensor GreedyArgmax(const Tensor& logits, const OptTensor& out = std::nullopt);

// ---- rotary position embedding (RoPE, Su et al. 2021) ----------------------------
// ("RoFormer: Enhanced Transformer with Rotary Position Embedding").
struct RopeParams { int64_t rotary_dim; float base; };
// x [T, heads, head_dim], positions int32 [T]. Rotates the first rotary_dim
// (even, 0 < rotary_dim <= head_dim) features of every head; the rest pass through.
// base (the RoPE theta, e.g. 10000 or 1e6) > 0; angles in radians.
// inv_freq[i] = base^(-2i/rotary_dim), angle = position * inv_freq[i]; the CPU oracle
// computes inv_freq, angle, cos and sin in double and rounds cos/sin once to f32, so
// angles stay exact to positions 131072 and beyond; Metal reduces the angle modulo one
// turn in extended precision before precise cos/sin, within ~2e-7 of float64 up to
// position 2^24 (metal/rope_math.h).
// NeoX / half-split (GPT-NeoX, Llama in Hugging Face layout, Qwen): pairs
// (i, i + rotary_dim/2). out may be x.
Tensor RopeNeox(const Tensor& x, const Tensor& positions, int64_t rotary_dim, float base,
                const OptTensor& out = std::nullopt);
// Interleaved / GPT-J (Llama in GGUF / Meta layout): pairs (2i, 2i + 1). out may be x.
Tensor RopeInterleaved(const Tensor& x, const Tensor& positions, int64_t rotary_dim,
                       float base, const OptTensor& out = std::nullopt);
// positions int32 [T] -> float32 [T, rotary_dim]: cos(angle_i) for i < rotary_dim/2,
// then sin(angle_i). Angles computed with accurate (not fast) cos/sin.
Tensor RopeCosSinCache(const Tensor& positions, int64_t rotary_dim, float base,
                       const OptTensor& out = std::nullopt);
struct RopeFromCacheParams { bool neox; };
// Applies rows of a cos|sin cache [P, rotary_dim] (float32) selected by
// positions int32 [T] (row indices in [0, P)) to x [T, heads, head_dim]; rotary_dim
// even, <= head_dim. Bit-exact across devices (no transcendental function is
// evaluated). out may be x.
Tensor RopeFromCache(const Tensor& x, const Tensor& cos_sin_cache, const Tensor& positions,
                     bool neox = true, const OptTensor& out = std::nullopt);
struct QkNormRopeParams { float eps; int64_t rotary_dim; float base; };
// Qwen3 recipe: RMSNorm (Zhang & Sennrich 2019) over head_dim of every q and k head
// (q_weight, k_weight [head_dim]) followed by NeoX RoPE. q [T, heads, head_dim],
// k [T, kv_heads, head_dim] -> (q_out, k_out). On the CPU exactly the composite of
// RmsNorm and RopeNeox (the normalised q and k rounded to their dtype); other devices
// may run one fused kernel gated against that composite.
std::tuple<Tensor, Tensor> QkNormRope(const Tensor& q, const Tensor& k, const Tensor& q_weight,
                                      const Tensor& k_weight, const Tensor& positions,
                                      float eps, int64_t rotary_dim, float base);

}  // namespace metalrt::ops

#include "metalrt/linear_attention_ops.h"   // causal_conv1d, gdn_gating, gated_delta_rule
