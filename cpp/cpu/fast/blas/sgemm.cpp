#include "cpu/fast/blas/sgemm.h"

#include <mutex>

#if defined(METALRT_BLAS_ACCELERATE)
#include <Accelerate/Accelerate.h>
#elif defined(METALRT_BLAS_OPENBLAS)
#include <cblas.h>   // scipy-openblas32: every symbol carries the scipy_ prefix
#endif

namespace metalrt::cpu::fast {
namespace {

#if defined(METALRT_BLAS_ACCELERATE)
// Accelerate sizes its own threads per call and has no thread-count API; a call
// from one of our pool threads on a tile is small enough to run on that thread.
void LimitBlasThreads() {}
constexpr auto kGemm = &cblas_sgemm;
#elif defined(METALRT_BLAS_OPENBLAS)
void LimitBlasThreads() { scipy_openblas_set_num_threads(1); }
constexpr auto kGemm = &scipy_cblas_sgemm;
#endif

}  // namespace

void Sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
           int64_t ldb, bool b_transposed, float* c, int64_t ldc) {
  static std::once_flag limited;
  std::call_once(limited, LimitBlasThreads);
  kGemm(CblasRowMajor, CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans, static_cast<int>(m),
        static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b,
        static_cast<int>(ldb), 0.0f, c, static_cast<int>(ldc));
}

}  // namespace metalrt::cpu::fast
