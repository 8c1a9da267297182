// The fast CPU paged attention: what a decode step runs (the prefill attention,
// prefill/paged_attention_bf16.cpp and prefill/blas/paged_attention.cpp, takes batches
// holding a prefill ahead of it; where neither serves, this one serves those too). The oracle (cpu/paged_attention.cpp) gathers every
// request's whole context into f32 scratch per call and splits the work by (token,
// head) alone; here keys and values are read in place through the block table, and the
// work is split into items of (token, chunk of kChunkKeys context positions) so a
// decode batch still spreads over the threads. An item reads its chunk's cache rows in
// memory order, every kv head's row of a position at once: items of one kv head each
// (a 768-byte stride through 256-byte rows) ran at half the oracle's speed on a cold
// cache, which gathers rows in order.
//
// A sliding window (params.window > 0) gives the token at position p the keys
// p - window + 1 .. p: its items are the chunks that meet that range, the first one cut
// at its start, so no key before it (nor its block-table entry) is read. Sinks (a logit
// per head, gpt-oss) join only the merge's denominator.
//
// Per item (every head h, its kv head g = h / group, keys j of the chunk), in f32:
//   s_hj = (q_h . k_j) * scale;  m_h = max_j s_hj;  w_hj = exp(s_hj - m_h)
//   l_h = sum over j ascending of w_hj;  o_h = sum over j ascending of w_hj v_j
// then per (token, head) the chunks are merged in ascending order (flash-decoding's
// split softmax):  M = max(max_c m_c, sink_h);  e_c = exp(m_c - M);
// out = (sum_c e_c o_c) / (sum_c e_c l_c + exp(sink_h - M)) (no sink: -inf, a 0 term),
// which is the oracle's two-pass softmax when the context is one chunk. The chunks
// depend on the context length only, never on the thread count, so results are
// bit-identical for any METALRT_CPU_THREADS. The dots, the softmax weights (a
// polynomial exp within 2 ulp of expf) and the weighted sums run in the best SIMD the
// CPU has (attention_kernels.h); that exp, the order of the f32 sums and the FMA's
// single rounding are all that differ from the oracle (bar: docs/cpu.md).
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/fast/attention/attention_kernels.h"
#include "cpu/float_rows.h"
#include "cpu/kv_blocks.h"
#include "cpu/parallel.h"
#include "metalrt/op_registry.h"
#include "metalrt/ops.h"

namespace metalrt::cpu::fast {
namespace {

// Context positions per item: 2 cache blocks of 16, so that a decode at a short context
// still gives both threads equal shares (context 192: 6 items; at 64 positions it was
// 3, one thread doing 2 while the other waited: 2-thread decode ~28 us against ~34).
constexpr int64_t kChunkKeys = 32;

// Multiply-adds a thread chunk does at least (below this the pool's handoff costs more).
constexpr int64_t kMinWorkPerChunk = int64_t{1} << 15;

struct Item {
  int64_t b, token, chunk;   // request, query row, chunk (positions chunk * kChunkKeys ..)
  int64_t lo, n;             // the token sees positions lo .. n - 1
};

// The token's chunks: those holding a position of lo .. n - 1.
int64_t FirstChunk(const Item& it) { return it.lo / kChunkKeys; }
int64_t ChunkCount(const Item& it) { return (it.n - 1) / kChunkKeys - FirstChunk(it) + 1; }

struct Geometry {
  int64_t heads, head_dim, kv_heads, group, block_size;
  int64_t partial_stride;   // floats per item: m [heads], l [heads], o [heads][head_dim]
  KvType key_type, value_type;
};

// Calls fn(j, run, slot) over the runs of positions [j0, j1) that lie in one cache
// block: positions j .. j + run - 1 sit in cache slots slot .. slot + run - 1.
template <class Fn>
void ForBlockRuns(const int32_t* blocks, const Geometry& geo, int64_t j0, int64_t j1, const Fn& fn) {
  for (int64_t j = j0; j < j1;) {
    const int64_t in_block = j % geo.block_size, run = std::min(j1 - j, geo.block_size - in_block);
    fn(j, run, static_cast<int64_t>(blocks[j / geo.block_size]) * geo.block_size + in_block);
    j += run;
  }
}

// Calls fn(first position, rows, row stride) over runs of positions [j0, j1) that lie in
// one cache block: the rows of every kv head (kv head g's at + g * head_dim), as f32
// (f16/bf16 caches converted, q8_0/q4_0 ones dequantized, into `tile`: at most one
// block's rows, so the context is read in place, never copied whole).
template <class Fn>
void ForRuns(const Tensor& cache, KvType type, const int32_t* blocks, const Geometry& geo, int64_t j0, int64_t j1,
             std::vector<float>& tile, const Fn& fn) {
  const int64_t row = geo.kv_heads * geo.head_dim;
  ForBlockRuns(blocks, geo, j0, j1, [&](int64_t j, int64_t run, int64_t slot) {
    if (type == KvType::kF32) {
      fn(j, run, cache.data_as<float>() + slot * row);
    } else {
      tile.resize(static_cast<size_t>(run * row));
      LoadKvRows(cache.data(), type, slot * geo.kv_heads, run * geo.kv_heads, geo.head_dim, tile.data());
      fn(j, run, tile.data());
    }
  });
}

// Asks for the cache rows of positions [j0, j1) (every kv head's) ahead of their use,
// into the L2 (prefetcht2 on x86; a hint, never a fault). A decode step finds an item's
// K/V in memory (the weights streamed through the caches since), and the kernels'
// loads alone kept too few lines in flight: 32 positions' rows asked for at once
// before the K pass, V's with them, cut a cold 2-thread call at context 192 from ~28 to
// ~23 us; hot (L2-resident) calls pay ~1 us for the extra instructions.
void PrefetchRows(const Tensor& cache, KvType type, const int32_t* blocks, const Geometry& geo, int64_t j0,
                  int64_t j1) {
  const int64_t row_bytes = geo.kv_heads * KvRowBytes(type, geo.head_dim);
  const char* base = static_cast<const char*>(cache.data());
  ForBlockRuns(blocks, geo, j0, j1, [&](int64_t, int64_t run, int64_t slot) {
    for (int64_t b = 0; b < run * row_bytes; b += 64) __builtin_prefetch(base + slot * row_bytes + b, 0, 1);
  });
}

// One item: every head of the token over the chunk's keys, in memory order (the kv heads'
// rows of a position are adjacent in the cache), to m, l and o of `partial`.
void RunItem(const OpCall& call, const Geometry& geo, const AttentionKernels& kernels, const Item& it,
             float* partial) {
  thread_local std::vector<float> q, s, tile;
  const Tensor& query = call.inputs[0];
  const Tensor& block_tables = call.inputs[3];
  const int32_t* blocks = block_tables.data_as<int32_t>() + it.b * block_tables.dim(1);
  const int64_t heads = geo.heads, group = geo.group, head_dim = geo.head_dim;
  q.resize(static_cast<size_t>(heads * head_dim));
  s.resize(static_cast<size_t>(heads * kChunkKeys));
  LoadRowF32(query.data(), query.dtype(), it.token * heads * head_dim, heads * head_dim, q.data());
  const int64_t j0 = std::max(it.lo, it.chunk * kChunkKeys), j1 = std::min(it.n, it.chunk * kChunkKeys + kChunkKeys);
  const int64_t row_stride = geo.kv_heads * head_dim;
  const float scale = call.param<ops::PagedAttentionParams>().scale;
  auto args = [&](int64_t g) {
    return AttentionTileArgs{q.data() + g * group * head_dim, group, head_dim, row_stride, kChunkKeys, scale};
  };
  PrefetchRows(call.inputs[1], geo.key_type, blocks, geo, j0, j1);
  PrefetchRows(call.inputs[2], geo.value_type, blocks, geo, j0, j1);
  ForRuns(call.inputs[1], geo.key_type, blocks, geo, j0, j1, tile, [&](int64_t j, int64_t run, const float* k) {
    for (int64_t g = 0; g < geo.kv_heads; ++g)
      kernels.scores(args(g), k + g * head_dim, run, s.data() + g * group * kChunkKeys + (j - j0));
  });
  float* m = partial;
  float* l = partial + heads;
  float* o = partial + 2 * heads;
  for (int64_t h = 0; h < heads; ++h) m[h] = kernels.softmax(s.data() + h * kChunkKeys, j1 - j0, kChunkKeys, l + h);
  std::fill(o, o + heads * head_dim, 0.0f);
  ForRuns(call.inputs[2], geo.value_type, blocks, geo, j0, j1, tile, [&](int64_t j, int64_t run, const float* v) {
    for (int64_t g = 0; g < geo.kv_heads; ++g)
      kernels.accumulate(args(g), s.data() + g * group * kChunkKeys + (j - j0), v + g * head_dim, run,
                         o + g * group * head_dim);
  });
}

// out row of (token, head h) from the token's chunks, items first, first + 1, ...;
// `sinks` the heads' sink logits or null.
void Merge(const OpCall& call, const Geometry& geo, const std::vector<Item>& items, const float* partials,
           const float* sinks, int64_t first, int64_t h) {
  thread_local std::vector<float> acc;
  const int64_t head_dim = geo.head_dim;
  const Item& it = items[first];
  const int64_t chunks = ChunkCount(it);
  auto partial = [&](int64_t c) { return partials + (first + c) * geo.partial_stride; };
  acc.assign(static_cast<size_t>(head_dim), 0.0f);
  const float sink = sinks ? sinks[h] : -INFINITY;
  float big = sink;
  for (int64_t c = 0; c < chunks; ++c) big = std::max(big, partial(c)[h]);
  float l = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) {
    const float* p = partial(c);
    const float e = std::exp(p[h] - big);
    l += e * p[geo.heads + h];
    const float* o = p + 2 * geo.heads + h * head_dim;
    for (int64_t d = 0; d < head_dim; ++d) acc[d] += e * o[d];
  }
  l += std::exp(sink - big);   // 0 without a sink
  for (int64_t d = 0; d < head_dim; ++d) acc[d] /= l;
  StoreRowF32(call.outputs[0].data(), call.outputs[0].dtype(), (it.token * geo.heads + h) * head_dim, head_dim,
              acc.data());
}

bool FastPagedAttention(const OpCall& call) {
  const Tensor& query = call.inputs[0];
  const Tensor& key_cache = call.inputs[1];
  const Tensor& block_tables = call.inputs[3];
  const int32_t* seq_lens = call.inputs[4].data_as<int32_t>();
  const int32_t* query_start_loc = call.inputs[5].data_as<int32_t>();
  const int64_t window = call.param<ops::PagedAttentionParams>().window;
  const float* sinks = call.inputs.size() > 6 ? call.inputs[6].data_as<float>() : nullptr;
  if (query.numel() == 0) return true;   // no tokens, heads or features to attend
  Geometry geo{query.dim(1), query.dim(2), key_cache.dim(2), 0, key_cache.dim(1), 0,
               KvTypeOf(key_cache, query.dim(2), "paged_attention", "key_cache"),
               KvTypeOf(call.inputs[2], query.dim(2), "paged_attention", "value_cache")};
  geo.group = geo.heads / geo.kv_heads;
  geo.partial_stride = geo.heads * (geo.head_dim + 2);
  const int64_t tokens = query.dim(0);
  // Items ordered by (token, chunk); first[t] is token t's first.
  // The caller's scratch, kept between calls; named by reference so the pool's threads
  // read the caller's vectors, not their own thread_local ones.
  thread_local std::vector<Item> items_scratch;
  thread_local std::vector<int64_t> first_scratch;
  thread_local std::vector<float> partials_scratch;
  std::vector<Item>& items = items_scratch;
  std::vector<int64_t>& first = first_scratch;
  std::vector<float>& partials = partials_scratch;
  items.clear();
  first.assign(static_cast<size_t>(tokens), -1);
  int64_t widest = 1;
  for (int64_t b = 0; b < block_tables.dim(0); ++b) {
    const int64_t q_len = query_start_loc[b + 1] - query_start_loc[b];
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t token = query_start_loc[b] + i, n = seq_lens[b] - q_len + i + 1;   // causal: .. p
      const int64_t lo = window > 0 ? std::max<int64_t>(0, n - window) : 0;
      widest = std::max(widest, n - lo);
      first[token] = static_cast<int64_t>(items.size());
      const Item head{b, token, 0, lo, n};
      for (int64_t c = FirstChunk(head); c < FirstChunk(head) + ChunkCount(head); ++c)
        items.push_back({b, token, c, lo, n});
    }
  }
  partials.resize(items.size() * static_cast<size_t>(geo.partial_stride));
  const AttentionKernels kernels = SelectedAttentionKernels();
  const int64_t item_work = 2 * geo.heads * geo.head_dim * std::min(widest, kChunkKeys);
  ParallelFor(static_cast<int64_t>(items.size()), std::max<int64_t>(1, kMinWorkPerChunk / item_work),
              [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i)
                  RunItem(call, geo, kernels, items[i], partials.data() + i * geo.partial_stride);
              });
  // A token's heads read only its own items; a decode batch's merge is too small to fork.
  const int64_t merge_work = geo.head_dim * ((widest + 2 * kChunkKeys - 2) / kChunkKeys);   // chunks, at most
  ParallelFor(tokens * geo.heads, std::max<int64_t>(1, kMinWorkPerChunk / merge_work), [&](int64_t begin, int64_t end) {
    for (int64_t th = begin; th < end; ++th) {
      const int64_t token = th / geo.heads, h = th % geo.heads;
      if (first[token] >= 0) Merge(call, geo, items, partials.data(), sinks, first[token], h);
    }
  });
  return true;
}

}  // namespace

// Behind the prefill attentions, which take the batches holding a prefill they serve.
METALRT_REGISTER_OP_PROVIDER("paged_attention", DeviceType::kCPU, ProviderTier::kFast, FastPagedAttention);

}  // namespace metalrt::cpu::fast
