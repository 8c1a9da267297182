# The fast CPU providers (cpp/cpu/fast): the per-ISA GEMV and attention kernels get their target
# flags here, file by file, so nothing else in the binary is compiled for an
# instruction set the CPU may lack (cpu_features.cpp chooses at run time).
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64" AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang"
   AND NOT CMAKE_OSX_ARCHITECTURES MATCHES "arm64")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/gemv_avx2.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/gemv_avx512_vnni.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/q8_activation_avx512.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx512f;-mavx512bw")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/attention_avx2.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/attention_avx512.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mavx512f")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/exp_avx512.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mavx512f")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/gemm_bf16_avx512.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512bw;-mavx512vl;-mavx512bf16")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/gemm_bf16_amx.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mavx512f;-mamx-tile;-mamx-bf16")
endif()
