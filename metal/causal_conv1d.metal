// causal_conv1d: causal depthwise conv1d with a carried state (the CPU oracle
// cpp/cpu/causal_conv1d.cpp is the spec). One thread per (channel, request): xpad is
// the slot's K-1 state values then the request's tokens; y[t] = act(sum over j ascending
// of w[j] xpad[t + j]) in f32, rounded once; then the state becomes the last K-1
// entries of xpad, copied in the input dtype. The thread owns its (slot, channel) state
// row, so reading the old state before writing the new one needs no barrier.
// * causal_conv1d_decode_<dtype>: requests of one token (a decode step);
// * causal_conv1d_prefill_<dtype>: requests of more tokens.
// A thread of a request the variant does not serve returns at once.
#include <metal_stdlib>
#include "linear_attention_args.h"
using namespace metal;

// xpad[i] of request (first, slot) and channel c: state for i < K-1, else token i-(K-1).
template <typename T>
inline float padded_input(device const T* x, device const T* state_row, int32_t first, int32_t i,
                          int32_t c, constant CausalConv1dArgs& args) {
  const int32_t history = args.width - 1;
  return i < history ? float(state_row[i]) : float(x[long(first + i - history) * args.channels + c]);
}

template <typename T>
inline void convolve_request(device const T* x, device const T* weight, device T* conv_state,
                             device const int32_t* query_start, device const int32_t* state_slots,
                             device T* y, uint2 gid, constant CausalConv1dArgs& args) {
  const int32_t c = int32_t(gid.x), r = int32_t(gid.y);
  const int32_t first = query_start[r], len = query_start[r + 1] - first, history = args.width - 1;
  device T* state_row = conv_state + (long(state_slots[r]) * args.channels + c) * history;
  device const T* w = weight + long(c) * args.width;
  for (int32_t t = 0; t < len; ++t) {
    float acc = 0.0f;
    for (int32_t j = 0; j < args.width; ++j)
      acc += float(w[j]) * padded_input(x, state_row, first, t + j, c, args);
    y[long(first + t) * args.channels + c] = T(args.silu ? acc / (1.0f + exp(-acc)) : acc);
  }
  // Ascending: entry i reads xpad[len + i], never an entry already overwritten (len >= 1).
  for (int32_t i = 0; i < history; ++i) {
    const int32_t src = len + i;
    state_row[i] = src < history ? state_row[src] : x[long(first + src - history) * args.channels + c];
  }
}

// Grid: threads (channels, requests).
template <typename T>
kernel void causal_conv1d_decode(device const T* x [[buffer(0)]],
                                 device const T* weight [[buffer(1)]],
                                 device T* conv_state [[buffer(2)]],
                                 device const int32_t* query_start [[buffer(3)]],
                                 device const int32_t* state_slots [[buffer(4)]],
                                 device T* y [[buffer(5)]],
                                 constant CausalConv1dArgs& args [[buffer(6)]],
                                 uint2 gid [[thread_position_in_grid]]) {
  if (query_start[gid.y + 1] - query_start[gid.y] != 1) return;
  convolve_request(x, weight, conv_state, query_start, state_slots, y, gid, args);
}

template <typename T>
kernel void causal_conv1d_prefill(device const T* x [[buffer(0)]],
                                  device const T* weight [[buffer(1)]],
                                  device T* conv_state [[buffer(2)]],
                                  device const int32_t* query_start [[buffer(3)]],
                                  device const int32_t* state_slots [[buffer(4)]],
                                  device T* y [[buffer(5)]],
                                  constant CausalConv1dArgs& args [[buffer(6)]],
                                  uint2 gid [[thread_position_in_grid]]) {
  if (query_start[gid.y + 1] - query_start[gid.y] < 2) return;
  convolve_request(x, weight, conv_state, query_start, state_slots, y, gid, args);
}

#define METALRT_CAUSAL_CONV1D(T, SUFFIX)                                                    \
  template [[host_name("causal_conv1d_decode_" #SUFFIX)]] kernel void                      \
  causal_conv1d_decode<T>(device const T*, device const T*, device T*, device const int32_t*, \
                          device const int32_t*, device T*, constant CausalConv1dArgs&, uint2); \
  template [[host_name("causal_conv1d_prefill_" #SUFFIX)]] kernel void                     \
  causal_conv1d_prefill<T>(device const T*, device const T*, device T*, device const int32_t*, \
                           device const int32_t*, device T*, constant CausalConv1dArgs&, uint2);

METALRT_CAUSAL_CONV1D(float, f32)
METALRT_CAUSAL_CONV1D(half, f16)
METALRT_CAUSAL_CONV1D(bfloat, bf16)
