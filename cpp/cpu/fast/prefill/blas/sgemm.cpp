#include "cpu/fast/prefill/blas/sgemm.h"

#include <mutex>

#if defined(METALRT_BLAS_ACCELERATE)
#include <Accelerate/Accelerate.h>
#elif defined(METALRT_BLAS_OPENBLAS)
#include <dlfcn.h>
#include <cblas.h>   // scipy-openblas32: every symbol carries the scipy_ prefix
#endif

namespace metalrt::cpu::fast {
namespace {

#if defined(METALRT_BLAS_ACCELERATE)
// Accelerate sizes its own threads per call and has no thread-count API; a call
// from one of our pool threads on a tile is small enough to run on that thread.
void LimitBlasThreads() {}
#elif defined(METALRT_BLAS_OPENBLAS)
// The library's entry points, or null ones when it cannot be loaded. Only the prototypes
// come from the wheel's header: the extension does not link the library, whose directory
// depends on where pip put scipy_openblas32 (a --system-site-packages venv puts it in
// another site directory than metalrt). dlopen by soname finds the copy that
// python/metalrt/_blas.py loaded by path, else searches the usual places (the doctest
// executables' rpath).
struct OpenBlas {
  decltype(&scipy_cblas_sgemm) sgemm = nullptr;
  decltype(&scipy_openblas_set_num_threads) set_num_threads = nullptr;
};

const OpenBlas& Library() {
  static const OpenBlas library = [] {
    OpenBlas lib;
    void* handle = dlopen("libscipy_openblas.so", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return lib;
    lib.sgemm = reinterpret_cast<decltype(lib.sgemm)>(dlsym(handle, "scipy_cblas_sgemm"));
    lib.set_num_threads =
        reinterpret_cast<decltype(lib.set_num_threads)>(dlsym(handle, "scipy_openblas_set_num_threads"));
    if (lib.sgemm == nullptr || lib.set_num_threads == nullptr) return OpenBlas{};
    return lib;
  }();
  return library;
}

void LimitBlasThreads() { Library().set_num_threads(1); }
#endif

void Gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          bool b_transposed, float beta, float* c, int64_t ldc) {
  static std::once_flag limited;
  std::call_once(limited, LimitBlasThreads);
#if defined(METALRT_BLAS_OPENBLAS)
  const auto gemm = Library().sgemm;
#else
  constexpr auto gemm = &cblas_sgemm;
#endif
  gemm(CblasRowMajor, CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans, static_cast<int>(m),
       static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb),
       beta, c, static_cast<int>(ldc));
}

}  // namespace

bool BlasAvailable() {
#if defined(METALRT_BLAS_OPENBLAS)
  return Library().sgemm != nullptr;
#else
  return true;
#endif
}

void Sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
           int64_t ldb, bool b_transposed, float* c, int64_t ldc) {
  Gemm(m, n, k, a, lda, b, ldb, b_transposed, 0.0f, c, ldc);
}

void SgemmAccumulate(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                     int64_t ldb, bool b_transposed, float* c, int64_t ldc) {
  Gemm(m, n, k, a, lda, b, ldb, b_transposed, 1.0f, c, ldc);
}

}  // namespace metalrt::cpu::fast
