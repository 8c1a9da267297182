// MXFP4's number formats (OCP Microscaling Formats v1.0, §5.3.3 FP4 E2M1 and §5.4.1
// E8M0), one definition for the CPU oracle (cpp/cpu/quantized_blocks.cpp), the fast
// CPU GEMV (cpp/cpu/fast/gemv) and the MSL chunk decoders (quantized_blocks.h).
// A 4-bit code is sign (bit 3), exponent (bits 2-1) and mantissa (bit 0): magnitudes
// 0, 0.5, 1, 1.5, 2, 3, 4, 6. They are kept doubled (integers, as ggml's kvalues_mxfp4)
// against a halved scale 2^(e - 128), so every product is exact in f32 for every E8M0
// exponent e in 0..255 (2^(e - 127) itself is not an f32 for e = 255).
#ifndef METALRT_METAL_MXFP4_VALUES_H_
#define METALRT_METAL_MXFP4_VALUES_H_
#include "metal_constants.h"
#ifndef __METAL_VERSION__
#include <cstdint>
#endif

// Twice the E2M1 magnitude of code bits 2-0.
METALRT_CONSTANT int kE2M1Doubled[8] = {0, 1, 2, 3, 4, 6, 8, 12};
METALRT_CONSTANT int kE2M1SignBit = 8;

// The f32 bits of 2^(e - 128) for an E8M0 exponent e (ggml's ggml_e8m0_to_fp32_half):
// subnormal 2^-128 and 2^-127 for e = 0 and 1, else the biased exponent e - 1.
inline uint32_t e8m0_half_bits(uint32_t e) { return e < 2 ? 0x00200000u << e : (e - 1) << 23; }

#endif  // METALRT_METAL_MXFP4_VALUES_H_
