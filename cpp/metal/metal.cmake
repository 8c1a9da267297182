# The Apple GPU device (Apple only, included from CMakeLists.txt under if(APPLE)):
# the project's kernels built into metalrt.metallib with Apple's Metal compiler, and
# cpp/metal/*.mm (Metal.framework) linked into every binary that links metalrt_core.
# The kernels are the same metal/*.metal files the simulated device compiles.
enable_language(OBJCXX)

find_program(METALRT_XCRUN xcrun REQUIRED)
file(GLOB METALRT_METAL_KERNELS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/metal/*.metal)
set(METALRT_METALLIB ${CMAKE_BINARY_DIR}/metalrt.metallib)
set(METALRT_AIR_FILES)
foreach(src ${METALRT_METAL_KERNELS})
  get_filename_component(stem ${src} NAME_WE)
  set(air ${CMAKE_CURRENT_BINARY_DIR}/air/${stem}.air)
  # -fno-fast-math: the rounding the CPU oracle and the simulated device reproduce.
  add_custom_command(
    OUTPUT ${air}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/air
    COMMAND ${METALRT_XCRUN} -sdk macosx metal -x metal -fno-fast-math
            -I ${CMAKE_CURRENT_SOURCE_DIR}/metal -c ${src} -o ${air}
    DEPENDS ${src}
    COMMENT "metal ${stem}.metal"
    VERBATIM)
  list(APPEND METALRT_AIR_FILES ${air})
endforeach()

if(METALRT_AIR_FILES)
  # Output beside the test binary (build/tests) so the native device finds it there too.
  add_custom_command(
    OUTPUT ${METALRT_METALLIB}
    COMMAND ${METALRT_XCRUN} -sdk macosx metallib ${METALRT_AIR_FILES} -o ${METALRT_METALLIB}
    DEPENDS ${METALRT_AIR_FILES}
    COMMENT "metallib metalrt.metallib"
    VERBATIM)
  add_custom_target(metalrt_metallib ALL DEPENDS ${METALRT_METALLIB})
  if(METALRT_BUILD_PYTHON)
    # The native device loads it from the extension's directory.
    install(FILES ${METALRT_METALLIB} DESTINATION metalrt)
  endif()
else()
  message(WARNING "no metal/*.metal kernels: metalrt.metallib is not built")
endif()

file(GLOB METALRT_OBJC_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/cpp/metal/*.mm)
target_sources(metalrt_core PRIVATE ${METALRT_OBJC_SOURCES})
set_source_files_properties(${METALRT_OBJC_SOURCES} PROPERTIES COMPILE_OPTIONS "-fobjc-arc;-fblocks")
target_link_libraries(metalrt_core PUBLIC "-framework Metal" "-framework Foundation")
