# metalrt_add_metallib(<target> <output.metallib> <kernel dir>): builds every
# <kernel dir>/*.metal into one metallib with METALRT_METAL_COMPILER (Apple's `metal`,
# found and probed by metal_compiler.cmake) and METALRT_METALLIB_TOOL (`metallib`),
# every compile with METALRT_METAL_FLAGS (metal_versions.cmake). Each tool may be a
# command list (tests/cmake/metallib_rule points both at a stub that records its
# arguments, so this rule is gated on Linux).
#
# Every .air depends on its .metal file and on every header in <kernel dir>: a header
# edit (say kRowThreads in row_args.h) must rebuild the kernels, or the host would
# dispatch groups sized for the new value to kernels compiled for the old one. All
# headers rather than a depfile: that `metal` writes depfiles is not verified, and
# there are a dozen kernels.
include_guard(GLOBAL)
include(${CMAKE_CURRENT_LIST_DIR}/metal_versions.cmake)

function(metalrt_add_metallib target output kernel_dir)
  file(GLOB kernels CONFIGURE_DEPENDS ${kernel_dir}/*.metal)
  file(GLOB headers CONFIGURE_DEPENDS ${kernel_dir}/*.h)
  if(NOT kernels)
    message(FATAL_ERROR "metalrt_add_metallib: no .metal kernels in ${kernel_dir}")
  endif()
  set(air_dir ${CMAKE_CURRENT_BINARY_DIR}/air)
  set(air_files)
  foreach(src ${kernels})
    get_filename_component(stem ${src} NAME_WE)
    set(air ${air_dir}/${stem}.air)
    add_custom_command(
      OUTPUT ${air}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${air_dir}
      COMMAND ${METALRT_METAL_COMPILER} ${METALRT_METAL_FLAGS} -I ${kernel_dir} -c ${src} -o ${air}
      DEPENDS ${src} ${headers}
      COMMENT "metal ${stem}.metal"
      VERBATIM)
    list(APPEND air_files ${air})
  endforeach()
  add_custom_command(
    OUTPUT ${output}
    COMMAND ${METALRT_METALLIB_TOOL} ${air_files} -o ${output}
    DEPENDS ${air_files}
    COMMENT "metallib ${output}"
    VERBATIM)
  add_custom_target(${target} ALL DEPENDS ${output})
endfunction()
