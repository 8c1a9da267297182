# Apple's Metal compiler for the build-time metallib (metal.cmake includes this).
# It sets METALRT_METAL_COMPILER (`metal`) and METALRT_METALLIB_TOOL (`metallib`).
# When METALRT_METAL_COMPILER ends up empty, the build makes no metallib and the
# native device compiles the embedded kernel sources at run time.
#
# `xcrun -f` only locates a tool. Xcode 26 without the Metal Toolchain component has
# a stub `metal` that xcrun finds but that fails when run. So configure also compiles
# and links a one-line kernel with the build's own flags (METALRT_METAL_FLAGS) before
# it trusts the tools; a failure takes the embedded path. The result is not cached,
# so the next configure after `xcodebuild -downloadComponent MetalToolchain` builds the
# metallib. A METALRT_METAL_COMPILER given with -D is used as it is, without the
# probe, and an empty one forces the embedded path. tests/cmake/metal_probe gates
# this on Linux with stub tools.
include_guard(GLOBAL)
include(${CMAKE_CURRENT_LIST_DIR}/metal_versions.cmake)

# metalrt_xcrun_find(<tool> <path var> <error var>): `xcrun -sdk macosx -f <tool>`.
# Sets <path var> to the path, or empty with <error var> set to xcrun's message.
function(metalrt_xcrun_find tool path_var error_var)
  execute_process(COMMAND xcrun -sdk macosx -f ${tool}
                  OUTPUT_VARIABLE path ERROR_VARIABLE error RESULT_VARIABLE result
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_STRIP_TRAILING_WHITESPACE)
  if(result EQUAL 0)
    set(error "")
  else()
    set(path "")
    set(error "`xcrun -sdk macosx -f ${tool}` exited with status ${result}: ${error}")
  endif()
  set(${path_var} "${path}" PARENT_SCOPE)
  set(${error_var} "${error}" PARENT_SCOPE)
endfunction()

# metalrt_probe_step(<error var> <output> <command>...): runs the command. If it exits
# non-zero or writes no <output>, <error var> names the command, its exit status and
# its message; otherwise it is empty.
function(metalrt_probe_step error_var output)
  file(REMOVE ${output})
  execute_process(COMMAND ${ARGN} OUTPUT_VARIABLE message ERROR_VARIABLE message
                  RESULT_VARIABLE result)
  string(STRIP "${message}" message)
  list(JOIN ARGN " " command)
  if(NOT result EQUAL 0)
    set(${error_var} "`${command}` exited with status ${result}: ${message}" PARENT_SCOPE)
  elseif(NOT EXISTS ${output})
    set(${error_var} "`${command}` exited with status 0 but wrote no ${output}" PARENT_SCOPE)
  else()
    set(${error_var} "" PARENT_SCOPE)
  endif()
endfunction()

# metalrt_probe_metal_tools(<metal> <metallib> <error var>): compiles a one-line
# kernel with <metal> and METALRT_METAL_FLAGS and links it with <metallib>, in
# <build>/metal_compiler_probe. <error var> is empty when both work.
function(metalrt_probe_metal_tools metal metallib error_var)
  set(dir ${CMAKE_BINARY_DIR}/metal_compiler_probe)
  file(WRITE ${dir}/probe.metal
       "kernel void metalrt_probe(device float *out [[buffer(0)]]) { out[0] = 1.0f; }\n")
  metalrt_probe_step(error ${dir}/probe.air
                     ${metal} ${METALRT_METAL_FLAGS} -c ${dir}/probe.metal -o ${dir}/probe.air)
  if(NOT error)
    metalrt_probe_step(error ${dir}/probe.metallib
                       ${metallib} ${dir}/probe.air -o ${dir}/probe.metallib)
  endif()
  set(${error_var} "${error}" PARENT_SCOPE)
endfunction()

if(DEFINED METALRT_METAL_COMPILER)
  if(METALRT_METAL_COMPILER AND NOT DEFINED METALRT_METALLIB_TOOL)
    metalrt_xcrun_find(metallib METALRT_METALLIB_TOOL metallib_error)
    if(metallib_error)
      message(FATAL_ERROR "METALRT_METAL_COMPILER is set but metallib was not found "
                          "(${metallib_error}): set METALRT_METALLIB_TOOL as well.")
    endif()
  endif()
else()
  metalrt_xcrun_find(metal metal_path metal_error)
  if(metal_path)
    metalrt_xcrun_find(metallib metallib_path metal_error)
  endif()
  if(metal_path AND metallib_path)
    metalrt_probe_metal_tools("${metal_path}" "${metallib_path}" metal_error)
  endif()
  if(metal_error)
    set(METALRT_METAL_COMPILER "")
    message(WARNING
      "Apple's Metal compiler is missing or does not work (${metal_error}). "
      "metalrt builds without metalrt.metallib and compiles its kernels at run time "
      "(metalrt.metal_library_info() says so). To build the metallib: install Xcode, "
      "`sudo xcode-select -s /Applications/Xcode.app`, and on Xcode 26 "
      "`xcodebuild -downloadComponent MetalToolchain`; `xcrun -sdk macosx metal --version` "
      "must then print a version (docs/apple-validation.md).")
  else()
    set(METALRT_METAL_COMPILER ${metal_path})
    set(METALRT_METALLIB_TOOL ${metallib_path})
    message(STATUS "Metal compiler: ${metal_path} and ${metallib_path} "
                   "(a probe kernel compiled and linked)")
  endif()
endif()
