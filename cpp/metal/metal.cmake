# The Apple GPU device (Apple only, included from CMakeLists.txt under if(APPLE)):
# cpp/metal/*.mm (Metal.framework) linked into every binary that links metalrt_core,
# and, when Apple's Metal compiler is installed, the project's kernels built into
# metalrt.metallib. The kernels are the same metal/*.metal files the simulated device
# compiles.
#
# The compiler is not always there: `xcrun` exists with only the Command Line Tools,
# which have no `metal`, and Xcode 26 installs the Metal toolchain only on request. So
# configure asks `xcrun -sdk macosx -f metal`; without it the build makes no metallib
# and the native device compiles the embedded kernel sources (kernel_sources.cmake)
# at run time, needing no Xcode.
enable_language(OBJCXX)

if(NOT DEFINED METALRT_METAL_COMPILER)
  execute_process(COMMAND xcrun -sdk macosx -f metal
                  OUTPUT_VARIABLE metal_path ERROR_VARIABLE metal_error
                  RESULT_VARIABLE metal_result OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND xcrun -sdk macosx -f metallib
                  OUTPUT_VARIABLE metallib_path RESULT_VARIABLE metallib_result
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(metal_result EQUAL 0 AND metallib_result EQUAL 0)
    set(METALRT_METAL_COMPILER ${metal_path})
    set(METALRT_METALLIB_TOOL ${metallib_path})
  else()
    set(METALRT_METAL_COMPILER "")
    string(STRIP "${metal_error}" metal_error)
    message(WARNING
      "Apple's Metal compiler was not found (xcrun -sdk macosx -f metal: ${metal_error}). "
      "metalrt builds without metalrt.metallib and compiles its kernels at run time "
      "(metalrt.metal_library_info() says so). To build the metallib: install Xcode, "
      "`sudo xcode-select -s /Applications/Xcode.app`, and on Xcode 26 "
      "`xcodebuild -downloadComponent MetalToolchain` (docs/apple-validation.md).")
  endif()
endif()

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
