// Metal dispatch of greedy_argmax (metal/greedy_argmax.metal): a threadgroup per
// (chunk of kArgmaxChunk columns, row); rows of more than one chunk write a candidate
// per chunk to a [rows, chunks] scratch (from the buffer cache after the first step)
// that greedy_argmax_merge reduces, a threadgroup per row.
#include "gpu/kernel_launch.h"
#include "gpu/row_grid.h"
#include "metalrt/op_registry.h"
#include "row_args.h"

namespace metalrt::gpu {
namespace {

bool MetalGreedyArgmax(const OpCall& call) {
  const Tensor& logits = call.inputs[0];
  const Tensor& out = call.outputs[0];
  RowGrid grid;
  if (!RowGridOf(logits, &grid)) return false;
  const int32_t chunks = ArgmaxChunks(grid.cols);
  const GreedyArgmaxArgs args{grid.cols, chunks};
  static_assert(sizeof(ArgmaxCandidate) == 2 * sizeof(float), "a candidate is two 4-byte words");
  // Unread with one chunk: the output is bound in its place.
  const Tensor partials = chunks > 1 ? Tensor::Empty({static_cast<int64_t>(grid.rows), chunks, 2},
                                                      DType::kF32, DeviceType::kMETAL)
                                     : out;
  KernelLaunch(KernelName("greedy_argmax", "row", logits.dtype()))
      .input(0, logits)
      .output(1, out)
      .bytes(2, args)
      .output(3, partials)
      .threadgroups({static_cast<uint32_t>(chunks), grid.rows, 1}, {kRowThreads, 1, 1});
  if (chunks > 1)
    KernelLaunch("greedy_argmax_merge")
        .input(0, partials)
        .output(1, out)
        .bytes(2, args)
        .threadgroups({grid.rows, 1, 1}, {kRowThreads, 1, 1});
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("greedy_argmax", DeviceType::kMETAL, ProviderTier::kNative,
                             MetalGreedyArgmax);

}  // namespace metalrt::gpu
