// The Metal Shading Language version and macOS deployment target every kernel is
// compiled for: by `metal` at build time (cpp/metal/metallib.cmake passes
// -std=metal<version> -mmacosx-version-min=<target>) and by newLibraryWithSource: at
// run time (MTLCompileOptions). One definition: CMake's METALRT_MSL_VERSION and
// METALRT_MACOS_MIN reach this file as compile definitions.
//
// Why pinned: command-line `metal` otherwise targets the SDK's OS (Xcode 26 emits MSL
// 4.0, which macOS 15 refuses to load), and bfloat needs MSL 3.1, i.e. macOS 14.
// Why safe math: the kernels reproduce the CPU oracle's IEEE rounding (the metallib
// is built with -fno-fast-math; MTLMathModeSafe is the run-time equivalent).
#pragma once
#include <cstdint>

namespace metalrt::metal {

struct MetalCompileOptions {
  int language_major = 0;   // MSL 3.1: 3, 1
  int language_minor = 0;
  int macos_major = 0;      // deployment target, at least 14.0
  int macos_minor = 0;
  bool fast_math = true;
  // MTLLanguageVersion's encoding: (major << 16) | minor (MTLLanguageVersion3_1 = 0x30001).
  uint64_t mtl_language_version() const { return (uint64_t(language_major) << 16) | uint64_t(language_minor); }
};

// The options of the build this binary came from.
MetalCompileOptions RuntimeCompileOptions();

// MTLCompileOptions' math settings on macOS 15 and later, in Metal's enum values:
// mathMode (MTLMathModeSafe 0, Relaxed 1, Fast 2) and mathFloatingPointFunctions
// (MTLMathFloatingPointFunctionsFast 0, Precise 1). Both are needed: the functions
// default to Fast whatever the mode (Apple's MTLMathFloatingPointFunctions.fast: "the
// default behavior"), while `-fno-fast-math` and fastMathEnabled = NO (macOS 14) mean
// safe mode with precise functions.
struct MetalMathSettings {
  int math_mode = 0;
  int floating_point_functions = 0;
};
MetalMathSettings MathSettings(const MetalCompileOptions& options);

}  // namespace metalrt::metal
