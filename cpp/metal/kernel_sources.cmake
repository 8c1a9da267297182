# On every platform: the kernels as embedded MSL strings (embed_kernel_sources.py) and
# the run-time compile options, both joining metalrt_core. The native device compiles
# the strings when the build had no Metal compiler; Linux builds them so a gate can
# compile each on the simulated device.
include(${CMAKE_CURRENT_LIST_DIR}/metal_versions.cmake)

set(METALRT_EMBED_SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cpp/metal/embed_kernel_sources.py)
set(METALRT_EMBEDDED_SOURCES ${CMAKE_CURRENT_BINARY_DIR}/embedded_kernel_sources.cpp)
file(GLOB METALRT_EMBED_KERNELS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/metal/*.metal)
file(GLOB METALRT_EMBED_HEADERS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/metal/*.h)
add_custom_command(
  OUTPUT ${METALRT_EMBEDDED_SOURCES}
  COMMAND ${Python_EXECUTABLE} ${METALRT_EMBED_SCRIPT} ${METALRT_EMBEDDED_SOURCES} ${METALRT_EMBED_KERNELS}
  DEPENDS ${METALRT_EMBED_SCRIPT} ${METALRT_EMBED_KERNELS} ${METALRT_EMBED_HEADERS}
  COMMENT "embedding metal/*.metal as MSL strings"
  VERBATIM)

set(METALRT_COMPILE_OPTIONS_SOURCE ${CMAKE_CURRENT_SOURCE_DIR}/cpp/metal/metal_compile_options.cpp)
target_sources(metalrt_core PRIVATE ${METALRT_EMBEDDED_SOURCES} ${METALRT_COMPILE_OPTIONS_SOURCE})
metalrt_version_parts(${METALRT_MSL_VERSION} msl)
metalrt_version_parts(${METALRT_MACOS_MIN} macos)
set_property(SOURCE ${METALRT_COMPILE_OPTIONS_SOURCE} APPEND PROPERTY COMPILE_DEFINITIONS
             METALRT_MSL_VERSION_MAJOR=${msl_MAJOR} METALRT_MSL_VERSION_MINOR=${msl_MINOR}
             METALRT_MACOS_MIN_MAJOR=${macos_MAJOR} METALRT_MACOS_MIN_MINOR=${macos_MINOR})
