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

}  // namespace metalrt::metal
