# The fast CPU providers (cpp/cpu/fast), a folder a concept: gemv/ (decode-sized quantized
# products), attention/ (the decode attention), prefill/ (the GEMMs and attention of m > kGemvMaxRows:
# the bf16 GEMM always, its prefill/blas/ part, the f32 sgemm, added by cpp/cpu/blas.cmake
# when a BLAS is found), rowwise/ (the per-row ops
# of a decode step) and simd/ (which instruction sets the CPU runs, and the vector exp).
file(GLOB METALRT_FAST_SOURCES CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_LIST_DIR}/gemv/*.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention/*.cpp
  ${CMAKE_CURRENT_LIST_DIR}/prefill/*.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rowwise/*.cpp
  ${CMAKE_CURRENT_LIST_DIR}/simd/*.cpp)
target_sources(metalrt_core PRIVATE ${METALRT_FAST_SOURCES})
# The per-ISA GEMV, attention and GEMM kernels get their target flags here, file by file,
# so nothing else in the binary is compiled for an instruction set the CPU may lack
# (simd/cpu_features.cpp chooses at run time).
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64" AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang"
   AND NOT CMAKE_OSX_ARCHITECTURES MATCHES "arm64")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/gemv/gemv_avx2.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/gemv/gemv_avx512_vnni.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/gemv/gemv_kquant_avx512.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/gemv/q8_activation_avx512.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx512f;-mavx512bw")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/attention/attention_avx2.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/attention/attention_avx512.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mavx512f")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/simd/exp_avx512.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mavx512f")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/prefill/gemm_bf16_avx512.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512bw;-mavx512vl;-mavx512bf16")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/prefill/gemm_bf16_amx.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mavx512f;-mamx-tile;-mamx-bf16")
endif()
