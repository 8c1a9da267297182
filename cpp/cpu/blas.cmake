# BLAS for the CPU device's prefill GEMM (cpp/cpu/fast/prefill/blas): Accelerate on Apple,
# OpenBLAS from the scipy-openblas32 wheel elsewhere (a build requirement and a run-time
# dependency in pyproject.toml, loaded at run time). Without one the build still succeeds: the f32 sgemm
# providers are left out, the bf16 GEMM (cpp/cpu/fast/prefill, ours) still serves where
# the CPU has AVX-512 BF16 and the CPU oracle serves the rest.
#
#   METALRT_BLAS=auto        Accelerate on Apple, else scipy-openblas32 when the Python
#                            interpreter can import it, else none (the default)
#   METALRT_BLAS=off         none
#   METALRT_BLAS=openblas    scipy-openblas32, an error when it is missing
#   METALRT_BLAS=accelerate  Accelerate, an error off Apple
#
# The choice is METALRT_BLAS_NAME ("openblas", "accelerate" or "none"), compiled into
# the runtime as the macro of the same name so the gates know which providers exist.
set(METALRT_BLAS "auto" CACHE STRING "BLAS for the CPU prefill GEMM: auto, off, openblas or accelerate")
set_property(CACHE METALRT_BLAS PROPERTY STRINGS auto off openblas accelerate)

set(METALRT_BLAS_NAME "none")
if(METALRT_BLAS STREQUAL "accelerate" OR (METALRT_BLAS STREQUAL "auto" AND APPLE))
  if(NOT APPLE)
    message(FATAL_ERROR "METALRT_BLAS=accelerate: Accelerate exists only on Apple platforms")
  endif()
  find_library(METALRT_ACCELERATE_FRAMEWORK Accelerate REQUIRED)
  target_link_libraries(metalrt_core PUBLIC ${METALRT_ACCELERATE_FRAMEWORK})
  # The CBLAS prototypes of macOS 13.3+ (ACCELERATE_LAPACK_ILP64 left off: 32-bit ints).
  target_compile_definitions(metalrt_core PRIVATE ACCELERATE_NEW_LAPACK)
  set(METALRT_BLAS_NAME "accelerate")
elseif(METALRT_BLAS STREQUAL "openblas" OR METALRT_BLAS STREQUAL "auto")
  if(NOT Python_EXECUTABLE)
    find_package(Python COMPONENTS Interpreter)
  endif()
  if(Python_EXECUTABLE)
    execute_process(
      COMMAND "${Python_EXECUTABLE}" -c "import scipy_openblas32; print(scipy_openblas32.get_lib_dir())"
      OUTPUT_VARIABLE METALRT_OPENBLAS_LIB_DIR OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE METALRT_OPENBLAS_FOUND ERROR_QUIET)
  endif()
  if(Python_EXECUTABLE AND METALRT_OPENBLAS_FOUND EQUAL 0)
    # The wheel's own CMake package, for its header only: the library is dlopen-ed at
    # run time (cpp/cpu/fast/prefill/blas/sgemm.cpp), since where pip puts scipy_openblas32
    # relative to metalrt varies (another site directory in a --system-site-packages
    # venv); `import metalrt` loads it by the path the package reports
    # (python/metalrt/_blas.py), and without it the oracle serves. Executables built
    # here (doctests, benchmarks) find it by an rpath to the wheel's directory.
    find_package(OpenBLAS CONFIG REQUIRED NO_DEFAULT_PATH PATHS "${METALRT_OPENBLAS_LIB_DIR}/cmake/openblas")
    target_include_directories(metalrt_core PRIVATE $<TARGET_PROPERTY:OpenBLAS::OpenBLAS,INTERFACE_INCLUDE_DIRECTORIES>)
    target_link_libraries(metalrt_core PUBLIC ${CMAKE_DL_LIBS})
    target_link_options(metalrt_core INTERFACE
      "$<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:LINKER:-rpath,${METALRT_OPENBLAS_LIB_DIR}>")
    set(METALRT_BLAS_NAME "openblas")
  elseif(METALRT_BLAS STREQUAL "openblas")
    message(FATAL_ERROR "METALRT_BLAS=openblas: the Python interpreter (${Python_EXECUTABLE}) cannot "
                        "import scipy_openblas32; pip install scipy-openblas32, or configure with METALRT_BLAS=auto or off")
  endif()
elseif(NOT METALRT_BLAS STREQUAL "off")
  message(FATAL_ERROR "METALRT_BLAS must be auto, off, openblas or accelerate, got '${METALRT_BLAS}'")
endif()

if(NOT METALRT_BLAS_NAME STREQUAL "none")
  file(GLOB METALRT_BLAS_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/fast/prefill/blas/*.cpp)
  target_sources(metalrt_core PRIVATE ${METALRT_BLAS_SOURCES})
  string(TOUPPER "${METALRT_BLAS_NAME}" METALRT_BLAS_UPPER)
  target_compile_definitions(metalrt_core PRIVATE METALRT_BLAS_${METALRT_BLAS_UPPER}=1)
endif()
target_compile_definitions(metalrt_core PUBLIC METALRT_BLAS_NAME="${METALRT_BLAS_NAME}")
message(STATUS "metalrt: BLAS for the CPU prefill GEMM: ${METALRT_BLAS_NAME} (METALRT_BLAS=${METALRT_BLAS})")
