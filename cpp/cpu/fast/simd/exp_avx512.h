// Rows of exp for AVX-512 F (exp_avx512.cpp, compiled with its own target flags in
// fast.cmake; called only where SelectedGemvIsa() is avx512_vnni): SwiGLU for
// silu_and_mul.cpp (and its swiglu_oai variant) and the softmax weights of the prefill attention.
//
// exp is Cephes's expf scheme (Moshier 1989): exp(x) = 2^j e^r with j = round(x log2 e),
// r = x - j ln 2 in two parts, e^r = 1 + r + r^2 P(r), P a degree-5 minimax polynomial
// (relative error <= 2^-23 on |r| <= ln 2 / 2); 2^j by vscalefps, which overflows to inf
// and underflows to 0 as expf does.
#pragma once
#include <cstdint>

namespace metalrt::cpu::fast {

// out[i] = gate[i] / (1 + exp(-gate[i])) * up[i] for i < n (f32; out may alias gate).
// NaN in gate or up gives NaN.
void SiluAndMulRowAvx512(const float* gate, const float* up, int64_t n, float* out);

// out[i] = (u + 1) * g / (1 + exp(-alpha g)), g = min(x[2i], limit), u = clamp(x[2i + 1],
// -limit, limit) for i < n (f32; the interleaved pairs of gpt-oss's swiglu_oai,
// metalrt/expert_ops.h). NaN in x gives NaN.
void SwigluOaiRowAvx512(const float* x, int64_t n, float alpha, float limit, float* out);

// The same on separate rows: g = min(gate[i], limit), u = clamp(up[i], -limit, limit).
void SwigluOaiHalvesRowAvx512(const float* gate, const float* up, int64_t n, float alpha, float limit,
                              float* out);

// s[j] = exp(s[j] - shift) for j < n; returns their f32 sum (16 partial sums, then
// added in lane order). shift is the row's finite maximum.
float ExpShiftedRowAvx512(float* s, int64_t n, float shift);

}  // namespace metalrt::cpu::fast
