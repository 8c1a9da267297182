// The last step of an online softmax, shared by the paged attention kernels: a row whose
// scores have maximum m and sum of exp(score - m) `sum` (its weighted values accumulated
// against m too), optionally with a sink logit that joins only the denominator (gpt-oss;
// transformers' GptOssAttention drops the sink's weight after the softmax):
//   out = acc * scale / denom,  M = max(m, sink), scale = e^(m - M),
//   denom = sum * scale + e^(sink - M).
// Taking M keeps e^(sink - M) <= 1 when the sink outweighs every score. Without a sink
// {1, sum}: out = acc / sum, the kernels' plain normalisation, bit for bit.
#ifndef METALRT_METAL_ATTENTION_SINKS_H_
#define METALRT_METAL_ATTENTION_SINKS_H_
#include <metal_stdlib>
using namespace metal;

struct SoftmaxNorm {
  float scale, denom;
};

inline SoftmaxNorm softmax_norm(float m, float sum, bool has_sink, float sink) {
  SoftmaxNorm n;
  if (!has_sink) {
    n.scale = 1.0f;
    n.denom = sum;
    return n;
  }
  const float top = max(m, sink);
  n.scale = exp(m - top);
  n.denom = sum * n.scale + exp(sink - top);
  return n;
}

#endif  // METALRT_METAL_ATTENTION_SINKS_H_
