// The quantized GEMV for AVX-512 VNNI on 256-bit vectors (compiled with -mavx512f
// -mavx512bw -mavx512vl -mavx512vnni, see fast.cmake; called only when
// SelectedGemvIsa() found the CPU bits and the OS's ZMM state in XCR0).
#include "cpu/fast/gemv_args.h"

#if defined(__x86_64__)
#include "cpu/fast/gemv_x86.h"

namespace metalrt::cpu::fast {
void GemvRowsAvx512Vnni(const GemvArgs& args, int64_t begin, int64_t end) { GemvRows<X86<true>>(args, begin, end); }
}  // namespace metalrt::cpu::fast
#endif
