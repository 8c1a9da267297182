// CPU oracle of causal_conv1d (metalrt/linear_attention_ops.h): for each request and
// channel, xpad = the K-1 state values then the request's tokens, in f32;
//   y[t] = act(sum over j ascending of w[j] * xpad[t + j]),  act = SiLU x / (1 + exp(-x))
// rounded once to the dtype, as nn.Conv1d(groups=C, padding=K-1) keeps the first T
// outputs (transformers' torch_causal_conv1d_update over a carried state). The new
// state is the last K-1 entries of xpad, stored unchanged in the input dtype.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/float_rows.h"
#include "cpu/parallel.h"
#include "metalrt/linear_attention_ops.h"
#include "metalrt/op_registry.h"

namespace metalrt::cpu {
namespace {

bool CpuCausalConv1d(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& weight = call.inputs[1];
  const Tensor& state = call.inputs[2];
  const int32_t* starts = call.inputs[3].data_as<int32_t>();
  const int32_t* slots = call.inputs[4].data_as<int32_t>();
  const Tensor& out = call.outputs[0];
  const bool silu = call.param<ops::CausalConv1dParams>().silu;
  const int64_t channels = x.dim(1), width = weight.dim(1), history = width - 1;
  const int64_t requests = call.inputs[4].dim(0);
  // Channels are independent, so the split over threads changes no result.
  ParallelFor(channels, 64, [&](int64_t begin, int64_t end) {
    std::vector<float> w(static_cast<size_t>(width)), xpad, y;
    for (int64_t c = begin; c < end; ++c) {
      LoadRowF32(weight.data(), weight.dtype(), c * width, width, w.data());
      for (int64_t r = 0; r < requests; ++r) {
        const int64_t first = starts[r], len = starts[r + 1] - first;
        if (len == 0) continue;
        const int64_t state_row = (int64_t{slots[r]} * channels + c) * history;
        xpad.resize(static_cast<size_t>(history + len));
        LoadRowF32(state.data(), state.dtype(), state_row, history, xpad.data());
        for (int64_t t = 0; t < len; ++t)
          LoadRowF32(x.data(), x.dtype(), (first + t) * channels + c, 1, &xpad[history + t]);
        y.resize(static_cast<size_t>(len));
        for (int64_t t = 0; t < len; ++t) {
          float acc = 0.0f;
          for (int64_t j = 0; j < width; ++j) acc += w[j] * xpad[t + j];
          y[t] = silu ? acc / (1.0f + std::exp(-acc)) : acc;
        }
        for (int64_t t = 0; t < len; ++t)
          StoreRowF32(out.data(), out.dtype(), (first + t) * channels + c, 1, &y[t]);
        StoreRowF32(state.data(), state.dtype(), state_row, history, xpad.data() + len);
      }
    }
  });
  return true;
}

}  // namespace

METALRT_REGISTER_OP_PROVIDER("causal_conv1d", DeviceType::kCPU, ProviderTier::kOracle, CpuCausalConv1d);

}  // namespace metalrt::cpu
