# The Apple GPU device (Apple only, included from CMakeLists.txt under if(APPLE)):
# cpp/metal/*.mm (Metal.framework) linked into every binary that links metalrt_core,
# and, when Apple's Metal compiler is installed and runs, the project's kernels built into
# metalrt.metallib. The kernels are the same metal/*.metal files the simulated device
# compiles.
#
# The compiler is not always there (the Command Line Tools have no `metal`; Xcode 26
# installs the Metal toolchain only on request): metal_compiler.cmake finds it and
# checks that it runs. Without it the build makes no metallib and the native device
# compiles the embedded kernel sources (kernel_sources.cmake) at run time, needing no
# Xcode.
enable_language(OBJCXX)

include(${CMAKE_CURRENT_LIST_DIR}/metal_compiler.cmake)
if(METALRT_METAL_COMPILER)
  include(${CMAKE_CURRENT_LIST_DIR}/metallib.cmake)
  # Output beside the test binary (build/tests) so the native device finds it there too.
  set(METALRT_METALLIB ${CMAKE_BINARY_DIR}/metalrt.metallib)
  metalrt_add_metallib(metalrt_metallib ${METALRT_METALLIB} ${CMAKE_CURRENT_SOURCE_DIR}/metal)
  if(METALRT_BUILD_PYTHON)
    # The native device loads it from the extension's directory.
    install(FILES ${METALRT_METALLIB} DESTINATION metalrt)
  endif()
endif()

file(GLOB METALRT_OBJC_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/cpp/metal/*.mm)
target_sources(metalrt_core PRIVATE ${METALRT_OBJC_SOURCES})
set_source_files_properties(${METALRT_OBJC_SOURCES} PROPERTIES COMPILE_OPTIONS "-fobjc-arc;-fblocks")
target_link_libraries(metalrt_core PUBLIC "-framework Metal" "-framework Foundation")
