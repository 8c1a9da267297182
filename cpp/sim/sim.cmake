# The simulated Metal device's build: its runtime sources join metalrt_core (from
# the main CMakeLists' glob), and metalrt_add_msl() turns .metal files into C++
# translation units (python/metalrt/_sim/msl_to_cpp.py) compiled into a target.
# The .metal files are the same ones the Apple metallib build compiles.

option(METALRT_SIM_TSAN "Build the simulated device with ThreadSanitizer (races between GPU threads of a threadgroup)" OFF)

set(METALRT_MSL_GENERATOR ${CMAKE_CURRENT_SOURCE_DIR}/python/metalrt/_sim/msl_to_cpp.py)
# The generator and the modules it imports (preprocessor pass, restrictions, ...).
file(GLOB METALRT_MSL_GENERATOR_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/python/metalrt/_sim/*.py)
set(METALRT_SHIM_DIR ${CMAKE_CURRENT_SOURCE_DIR}/metal/shim)
# What every compile of the shim needs to match MSL's C++ dialect: MSL `char` is
# signed, C++ leaves it to the target (unsigned on arm64 Linux). kernel_compiler.cpp
# passes the same to compile_shader's compiles.
set(METALRT_MSL_CXX_FLAGS -fsigned-char)
if(NOT Python_EXECUTABLE)
  find_package(Python 3.9 COMPONENTS Interpreter REQUIRED)
endif()

target_include_directories(metalrt_core PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/metal)
set_property(SOURCE ${CMAKE_CURRENT_SOURCE_DIR}/cpp/sim/kernel_compiler.cpp APPEND PROPERTY
             COMPILE_DEFINITIONS METALRT_SOURCE_DIR="${CMAKE_CURRENT_SOURCE_DIR}")

if(METALRT_SIM_TSAN)
  # The ucontext fibers carry TSan's fiber annotations; the hand-written switch
  # would hide the fibers from it.
  target_compile_definitions(metalrt_core PUBLIC METALRT_SIM_TSAN=1)
  target_compile_options(metalrt_core PUBLIC -fsanitize=thread -g)
  target_link_options(metalrt_core PUBLIC -fsanitize=thread)
endif()

# metalrt_add_msl(<target> <file.metal>...): each kernel file becomes a generated
# translation unit of <target>, registering its kernels in the sim's default library.
function(metalrt_add_msl target)
  foreach(metal ${ARGN})
    get_filename_component(stem ${metal} NAME_WE)
    file(RELATIVE_PATH rel ${CMAKE_CURRENT_SOURCE_DIR} ${metal})
    string(REPLACE "/" "_" rel_id "${rel}")
    set(out ${CMAKE_CURRENT_BINARY_DIR}/msl/${rel_id}.cpp)
    add_custom_command(
      OUTPUT ${out}
      COMMAND ${Python_EXECUTABLE} ${METALRT_MSL_GENERATOR} ${metal} ${out} --mode builtin
              --depfile ${out}.d --cxx ${CMAKE_CXX_COMPILER}
      DEPENDS ${metal} ${METALRT_MSL_GENERATOR_SOURCES}
      DEPFILE ${out}.d
      COMMENT "MSL -> C++ ${rel}"
      VERBATIM)
    target_sources(${target} PRIVATE ${out})
    # Kernel code is what the Metal compiler accepts: C++ warnings about it are noise.
    set_source_files_properties(${out} PROPERTIES
      INCLUDE_DIRECTORIES ${METALRT_SHIM_DIR}
      COMPILE_OPTIONS "-O2;${METALRT_MSL_CXX_FLAGS};-Wno-attributes;-Wno-unused-parameter;-Wno-unused-variable;-Wno-unused-but-set-variable")
  endforeach()
endfunction()

file(GLOB METALRT_KERNEL_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/metal/*.metal)
metalrt_add_msl(metalrt_core ${METALRT_KERNEL_SOURCES})

if(METALRT_BUILD_PYTHON)
  # compile_shader needs the shim at run time: it ships inside the package.
  install(DIRECTORY ${METALRT_SHIM_DIR}/ DESTINATION metalrt/_sim/shim)
endif()
