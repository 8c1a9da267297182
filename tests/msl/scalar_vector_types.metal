// MSL semantics suite: half and bfloat arithmetic (MSL spec §2.1: each operation
// rounds to nearest even), vector swizzles and constructors (§2.2), packed vectors
// (§2.2.3), select and as_type.
#include <metal_stdlib>
using namespace metal;

// out[4 i + 0..3] = a + b, a - b, a * b, a / b, each rounded once to T.
template <typename T>
kernel void arith16(device const T* a [[buffer(0)]],
                    device const T* b [[buffer(1)]],
                    device T* out [[buffer(2)]],
                    uint i [[thread_position_in_grid]]) {
  const T x = a[i], y = b[i];
  out[4 * i + 0] = x + y;
  out[4 * i + 1] = x - y;
  out[4 * i + 2] = x * y;
  out[4 * i + 3] = x / y;
}
template [[host_name("arith16_half")]] kernel void arith16<half>(
    device const half*, device const half*, device half*, uint);
template [[host_name("arith16_bfloat")]] kernel void arith16<bfloat>(
    device const bfloat*, device const bfloat*, device bfloat*, uint);

// float -> half / bfloat conversions (round to nearest even) and their bits.
kernel void narrow16(device const float* in [[buffer(0)]],
                     device ushort* half_bits [[buffer(1)]],
                     device ushort* bfloat_bits [[buffer(2)]],
                     uint i [[thread_position_in_grid]]) {
  half_bits[i] = as_type<ushort>(half(in[i]));
  bfloat_bits[i] = as_type<ushort>(bfloat(in[i]));
}

// Swizzle reads and writes, constructors from smaller vectors, packed vectors.
kernel void swizzles(device const float4* in [[buffer(0)]],
                     device float4* out [[buffer(1)]],
                     device packed_float3* packed [[buffer(2)]],
                     device uint4* ints [[buffer(3)]],
                     uint i [[thread_position_in_grid]]) {
  const float4 v = in[i];
  float4 r = 0.0f;
  r.xy = v.zw;          // (z, w, 0, 0)
  r.wz = v.xy;          // (z, w, y, x)
  r.x += v.w;           // (z + w, w, y, x)
  out[3 * i + 0] = r;
  out[3 * i + 1] = float4(v.bgr, v.a * 2.0f);
  half4 h = half4(v);
  h.yz = h.zy;
  out[3 * i + 2] = float4(h.wzyx);
  packed[i] = v.xyz + 1.0f;
  const uint4 u = uint4(as_type<uint>(v.x), uint(i), uint2(v.zw > 0.0f));
  ints[i] = select(u, uint4(7), bool4(false, false, v.x < 0.0f, false)) << uint4(0, 1, 2, 3);
}
