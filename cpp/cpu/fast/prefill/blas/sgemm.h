// The one call into the platform BLAS (cpp/cpu/blas.cmake picks it): a row-major f32
// GEMM, C = A . B or A . B^T, on the calling thread only.
#pragma once
#include <cstdint>

namespace metalrt::cpu::fast {

// The largest m, n or k (and leading dimension) one Sgemm call takes: the BLAS's
// 32-bit integer arguments.
inline constexpr int64_t kSgemmMaxDim = INT32_MAX;

// True when the BLAS can be called. Accelerate is linked, so always; OpenBLAS is
// looked up at first use (dlopen of libscipy_openblas.so, which `import metalrt` loads
// from the scipy_openblas32 package wherever it is installed, python/metalrt/_blas.py),
// so an install without it still imports and the BLAS providers decline to the oracle.
bool BlasAvailable();

// C[m, n] (row stride ldc) = A[m, k] (row stride lda) . op(B), where op(B) = B[k, n]
// (row stride ldb) or, with b_transposed, B[n, k]^T (row stride ldb); every value f32,
// every dimension in [1, kSgemmMaxDim]; only when BlasAvailable(). The BLAS runs
// single-threaded (its own thread pool is set to one thread when it is loaded) so that
// callers split the work over ParallelFor's METALRT_CPU_THREADS threads without
// oversubscribing the cores.
void Sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
           int64_t ldb, bool b_transposed, float* c, int64_t ldc);

// The same product added to C's values: C += A . op(B) (the BLAS's beta = 1).
void SgemmAccumulate(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                     int64_t ldb, bool b_transposed, float* c, int64_t ldc);

}  // namespace metalrt::cpu::fast
