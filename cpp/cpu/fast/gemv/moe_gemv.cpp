// The fast CPU provider of moe_matmul_bt for quantized expert stacks (every format the
// quantized GEMV reads: GGUF blocks, MLX affine, MXFP4), ahead of the oracle
// (cpu/moe.cpp), which dequantizes each selected row to f32. Here the (token, slot)
// pairs are grouped by expert, each group's activation rows quantized once
// (q8_activation.h) and run through the dense GEMV kernels against the expert's rows of
// the stack read in place: decode (one token, k experts) is k GEMVs of one row, a
// prefill one GEMV of up to kGemvMaxRows rows per group of an expert's pairs, each
// weight row decoded once per group. One parallel loop covers every (group, row
// chunk), so all threads work whatever k is; gated calls compute a chunk's gate rows
// and its up rows in the same item, as the fused gate|up GEMV does. Float stacks, an x
// holding NaN or infinity, and Metal tensors (the registry's reference tier) are left
// to the oracle. The only departure from the oracle is the GEMV's (bar: docs/cpu.md).
#include <algorithm>
#include <vector>

#include "cpu/fast/gemv/gemv_call.h"
#include "cpu/fast/gemv/matmul_dispatch.h"
#include "cpu/float_rows.h"
#include "cpu/parallel.h"
#include "metalrt/moe_ops.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu::fast {
namespace {

// An expert's pairs at sorted positions [first, first + count), count <= kGemvMaxRows.
struct PairGroup {
  int64_t expert, first, count;
};

// The calling thread's scratch, reused across calls (a decode step allocates nothing
// here once warm).
struct Scratch {
  std::vector<int64_t> start, next;   // per expert: its first sorted position, the next free one
  std::vector<int64_t> order;         // order[pos]: the pair at sorted position pos
  std::vector<PairGroup> groups;
  std::vector<Q8Block> sorted_x;
  std::vector<float> sorted_y;
};

// The pairs sorted by expert (a counting sort, so each expert's pairs keep their
// order) in s->order, and the groups of at most kGemvMaxRows consecutive ones. False
// for an id outside [0, experts), which the oracle serves (a zero row).
bool GroupPairs(const int32_t* ids, int64_t pairs, int64_t experts, Scratch* s) {
  s->start.assign(static_cast<size_t>(experts + 1), 0);
  for (int64_t i = 0; i < pairs; ++i) {
    if (ids[i] < 0 || ids[i] >= experts) return false;
    ++s->start[ids[i] + 1];
  }
  for (int64_t e = 0; e < experts; ++e) s->start[e + 1] += s->start[e];
  s->order.resize(static_cast<size_t>(pairs));
  s->next.assign(s->start.begin(), s->start.end() - 1);
  for (int64_t i = 0; i < pairs; ++i) s->order[s->next[ids[i]]++] = i;
  s->groups.clear();
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t first = s->start[e]; first < s->start[e + 1]; first += kGemvMaxRows)
      s->groups.push_back({e, first, std::min(kGemvMaxRows, s->start[e + 1] - first)});
  return true;
}

bool FastMoeMatmulBT(const OpCall& call) {
  const auto& p = call.param<ops::MoeMatmulParams>();
  const Tensor& x = call.inputs[0];
  const Tensor& ids = call.inputs[1];
  const Tensor& out = call.outputs[0];
  if (!p.quantized || x.device() != DeviceType::kCPU) return false;
  const int64_t pairs = ids.numel(), slots = ids.dim(1), k = x.dim(-1), width = out.dim(2);
  const int64_t n = p.gated ? width / 2 : width, blocks_per_row = k / 32;
  const bool per_slot = x.ndim() == 3;
  thread_local Scratch scratch;
  if (!GroupPairs(ids.data_as<int32_t>(), pairs, p.num_experts, &scratch)) return false;
  GemvActivations rows;
  if (!QuantizeActivationRows(x, &rows)) return false;
  // The activation rows and results in sorted order, so a group's are contiguous: the
  // GEMV's m rows of x and of out. Pointers, not the thread_local, reach the pool.
  scratch.sorted_x.resize(static_cast<size_t>(pairs * blocks_per_row));
  scratch.sorted_y.resize(static_cast<size_t>(pairs * width));
  const int64_t* order = scratch.order.data();
  const PairGroup* groups = scratch.groups.data();
  Q8Block* sorted_x = scratch.sorted_x.data();
  float* sorted_y = scratch.sorted_y.data();
  for (int64_t pos = 0; pos < pairs; ++pos) {
    const int64_t row = per_slot ? order[pos] : order[pos] / slots;
    std::copy_n(rows.blocks + row * blocks_per_row, blocks_per_row, sorted_x + pos * blocks_per_row);
  }
  const GemvRowsFn gemv = SelectedGemvRows();
  // Items (group, chunk of the expert's rows); the gated chunk is half the rows, its
  // gate and up rows together (as the fused gate|up GEMV).
  const int64_t chunk_rows = p.gated ? kMinRowsPerChunk / 2 : kMinRowsPerChunk;
  const int64_t chunks = (n + chunk_rows - 1) / chunk_rows;
  const QuantizedTensor* stacks[2] = {&p.w, &p.up};
  ParallelFor(static_cast<int64_t>(scratch.groups.size()) * chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const PairGroup& g = groups[item / chunks];
      const int64_t lo = item % chunks * chunk_rows, hi = std::min(n, lo + chunk_rows);
      const GemvActivations act{sorted_x + g.first * blocks_per_row, g.count, k};
      for (int s = 0; s < (p.gated ? 2 : 1); ++s)
        gemv(ArgsFor(*stacks[s], act, sorted_y + g.first * width + s * n, width, g.expert * n), lo, hi);
    }
  });
  ParallelFor(pairs, kGemvMaxRows, [&](int64_t begin, int64_t end) {
    for (int64_t pos = begin; pos < end; ++pos)
      StoreRowF32(out.data(), out.dtype(), order[pos] * width, width, sorted_y + pos * width);
  });
  return true;
}

METALRT_REGISTER_OP_PROVIDER("moe_matmul_bt", DeviceType::kCPU, ProviderTier::kFast, FastMoeMatmulBT);

}  // namespace
}  // namespace metalrt::cpu::fast
