// simdgroup_layout_probe: reports how this device lays an 8x8 SIMD-group matrix out
// over the lanes' thread_elements(), which MSL leaves unspecified. The host runs it
// once (cpp/gpu/simdgroup_layout_probe.cpp) and compares with the layout the prefill
// attention kernel assumes (simdgroup_layout.h). One SIMD-group of 32 threads writes
//   out[2l + e]      = element e of lane l after simdgroup_load of the matrix whose
//                      element (row r, column c) is 8r + c, and
//   out[64 + 8r + c] = element (r, c) that simdgroup_store writes after each lane l
//                      set its element e to 2l + e,
// all exact small integers in float, so each direction names its lane and element.
#include <metal_stdlib>
using namespace metal;

kernel void simdgroup_layout_probe(device float* out [[buffer(0)]],
                                   uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float numbered[64];
  numbered[2 * lane] = float(2 * lane);
  numbered[2 * lane + 1] = float(2 * lane + 1);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_matrix<float, 8, 8> loaded;
  simdgroup_load(loaded, numbered, 8);
  out[2 * lane] = loaded.thread_elements()[0];
  out[2 * lane + 1] = loaded.thread_elements()[1];
  simdgroup_matrix<float, 8, 8> stored;
  stored.thread_elements()[0] = float(2 * lane);
  stored.thread_elements()[1] = float(2 * lane + 1);
  simdgroup_store(stored, out + 64, 8);
}
