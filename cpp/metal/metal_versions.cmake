# The Metal Shading Language version and macOS deployment target of every kernel
# compile: `metal` at build time (metallib.cmake) and newLibraryWithSource: at run time
# (metal_compile_options.h, through compile definitions). MSL 3.1 (bfloat) needs
# macOS 14; a later CMAKE_OSX_DEPLOYMENT_TARGET (scikit-build-core sets it from
# MACOSX_DEPLOYMENT_TARGET) raises the target, an earlier one does not lower it.
include_guard(GLOBAL)

set(METALRT_MSL_VERSION 3.1)
set(METALRT_MACOS_MIN 14.0)
if(CMAKE_OSX_DEPLOYMENT_TARGET AND CMAKE_OSX_DEPLOYMENT_TARGET VERSION_GREATER METALRT_MACOS_MIN)
  set(METALRT_MACOS_MIN ${CMAKE_OSX_DEPLOYMENT_TARGET})
endif()

# The flags of every `metal` call: each kernel (metallib.cmake) and the configure-time
# probe (metal_compiler.cmake), so the probe tests what the build will run.
# -fno-fast-math: the rounding the CPU oracle and the simulated device reproduce.
set(METALRT_METAL_FLAGS -x metal -std=metal${METALRT_MSL_VERSION}
    -mmacosx-version-min=${METALRT_MACOS_MIN} -fno-fast-math)

# metalrt_version_parts(<version> <prefix>): <prefix>_MAJOR and <prefix>_MINOR (0 when absent).
function(metalrt_version_parts version prefix)
  string(REPLACE "." ";" parts "${version}.0")
  list(GET parts 0 major)
  list(GET parts 1 minor)
  set(${prefix}_MAJOR ${major} PARENT_SCOPE)
  set(${prefix}_MINOR ${minor} PARENT_SCOPE)
endfunction()
