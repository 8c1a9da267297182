# Prints, on one line, METALRT_METAL_FLAGS of cpp/metal/metal_versions.cmake: the flags
# cpp/metal/metallib.cmake passes to every `metal` compile besides -I, -c and -o
# (-x metal, the language version, the deployment target, -fno-fast-math). The macOS CI job compiles the
# kernels and the embedded sources with them, so CI tests what the build compiles
# (tests/python/test_ci_workflow.py compares them with the rule's real command line).
#
# usage: cmake -P .ci/metal_flags.cmake
include(${CMAKE_CURRENT_LIST_DIR}/../cpp/metal/metal_versions.cmake)
execute_process(COMMAND ${CMAKE_COMMAND} -E echo ${METALRT_METAL_FLAGS})
