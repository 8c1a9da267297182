#include "metal/metal_compile_options.h"

#if !defined(METALRT_MSL_VERSION_MAJOR) || !defined(METALRT_MACOS_MIN_MAJOR)
#error "cpp/metal/kernel_sources.cmake passes METALRT_MSL_VERSION_* and METALRT_MACOS_MIN_*"
#endif

namespace metalrt::metal {

MetalCompileOptions RuntimeCompileOptions() {
  MetalCompileOptions options;
  options.language_major = METALRT_MSL_VERSION_MAJOR;
  options.language_minor = METALRT_MSL_VERSION_MINOR;
  options.macos_major = METALRT_MACOS_MIN_MAJOR;
  options.macos_minor = METALRT_MACOS_MIN_MINOR;
  options.fast_math = false;
  return options;
}

MetalMathSettings MathSettings(const MetalCompileOptions& options) {
  constexpr int kMathModeSafe = 0, kMathModeFast = 2;
  constexpr int kFunctionsFast = 0, kFunctionsPrecise = 1;
  MetalMathSettings settings;
  settings.math_mode = options.fast_math ? kMathModeFast : kMathModeSafe;
  settings.floating_point_functions = options.fast_math ? kFunctionsFast : kFunctionsPrecise;
  return settings;
}

}  // namespace metalrt::metal
