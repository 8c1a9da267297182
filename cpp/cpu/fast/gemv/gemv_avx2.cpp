// The quantized GEMV for AVX2 + FMA (compiled with -mavx2 -mfma -mf16c, see fast.cmake;
// called only when SelectedGemvIsa() says the CPU and OS support it).
#include "cpu/fast/gemv/gemv_args.h"

#if defined(__x86_64__)
#include "cpu/fast/gemv/gemv_x86.h"

namespace metalrt::cpu::fast {
void GemvRowsAvx2(const GemvArgs& args, int64_t begin, int64_t end) { GemvRows<X86<false>>(args, begin, end); }
}  // namespace metalrt::cpu::fast
#endif
