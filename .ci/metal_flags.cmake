# Prints, on one line, the flags cpp/metal/metallib.cmake passes to every `metal`
# compile besides -x metal, -I, -c and -o: the language version and deployment target
# of cpp/metal/metal_versions.cmake, and -fno-fast-math. The macOS CI job compiles the
# kernels and the embedded sources with them, so CI tests what the build compiles
# (tests/python/test_ci_workflow.py compares them with the rule's real command line).
#
# usage: cmake -P .ci/metal_flags.cmake
include(${CMAKE_CURRENT_LIST_DIR}/../cpp/metal/metal_versions.cmake)
execute_process(COMMAND ${CMAKE_COMMAND} -E echo
                -std=metal${METALRT_MSL_VERSION} -mmacosx-version-min=${METALRT_MACOS_MIN} -fno-fast-math)
