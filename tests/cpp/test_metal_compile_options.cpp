// The run-time compile options of the native device (metal/metal_compile_options.h):
// the metallib's language version and deployment target, and safe math, so kernels
// compiled from the embedded sources round as the metallib's and the CPU oracle do.
#include <doctest/doctest.h>

#include "metal/metal_compile_options.h"

TEST_CASE("metal compile options: MSL 3.1 for macOS 14 or later, no fast math") {
  const metalrt::metal::MetalCompileOptions options = metalrt::metal::RuntimeCompileOptions();
  CHECK(options.language_major == 3);
  CHECK(options.language_minor == 1);
  CHECK(options.mtl_language_version() == 0x30001);   // MTLLanguageVersion3_1 = (3 << 16) + 1
  CHECK(options.macos_major >= 14);
  CHECK(options.macos_minor >= 0);
  CHECK_FALSE(options.fast_math);
}

TEST_CASE("metal compile options: macOS 15's math settings are safe mode with precise functions") {
  using metalrt::metal::MathSettings;
  metalrt::metal::MetalCompileOptions options = metalrt::metal::RuntimeCompileOptions();
  const metalrt::metal::MetalMathSettings run_time = MathSettings(options);
  CHECK(run_time.math_mode == 0);                  // MTLMathModeSafe
  CHECK(run_time.floating_point_functions == 1);   // MTLMathFloatingPointFunctionsPrecise
  options.fast_math = true;
  const metalrt::metal::MetalMathSettings fast = MathSettings(options);
  CHECK(fast.math_mode == 2);                      // MTLMathModeFast
  CHECK(fast.floating_point_functions == 0);       // MTLMathFloatingPointFunctionsFast
}
