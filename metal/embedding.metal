// embedding: the row gather out[t] = weight[ids[t]], one thread per output element of
// a 2-D grid (x: column, y: token), so a SIMD-group reads a contiguous run of one row.
// A bit-exact copy in any dtype, like the CPU oracle (cpp/cpu/embedding.cpp). The entry
// point rejects ids outside [0, vocab) wherever it can read them; one that reaches the
// kernel anyway gives a zero row, never a read outside the weight.
#include <metal_stdlib>
#include "embedding_args.h"
using namespace metal;

template <typename T>
kernel void embedding_gather(device const T* weight [[buffer(0)]],
                             device const int* ids [[buffer(1)]],
                             device T* out [[buffer(2)]],
                             constant EmbeddingArgs& args [[buffer(3)]],
                             uint2 position [[thread_position_in_grid]]) {
  const uint column = position.x, token = position.y;
  if (int(column) >= args.dim) return;
  const long id = ids[token];
  out[long(token) * args.dim + column] =
      id >= 0 && id < args.vocab ? weight[id * args.dim + column] : T(0);
}

#define METALRT_EMBEDDING(T, SUFFIX)                                                       \
  template [[host_name("embedding_gather_" #SUFFIX)]] kernel void embedding_gather<T>(     \
      device const T*, device const int*, device T*, constant EmbeddingArgs&, uint2);

METALRT_EMBEDDING(float, f32)
METALRT_EMBEDDING(half, f16)
METALRT_EMBEDDING(bfloat, bf16)
METALRT_EMBEDDING(char, i8)
METALRT_EMBEDDING(uchar, u8)
METALRT_EMBEDDING(int, i32)
METALRT_EMBEDDING(long, i64)
METALRT_EMBEDDING(uint, u32)
