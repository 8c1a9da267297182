#include "metalrt/kv_type.h"

#include <stdexcept>

#include "metalrt/dtype.h"

namespace metalrt {

int64_t KvBlockBytes(KvType type) {
  switch (type) {
    case KvType::kF32: return 4;
    case KvType::kF16: case KvType::kBF16: return 2;
    case KvType::kQ8_0: return 2 + kKvQuantBlock;
    case KvType::kQ4_0: return 2 + kKvQuantBlock / 2;
  }
  return 0;
}

int64_t KvRowBytes(KvType type, int64_t head_dim) {
  return IsQuantized(type) ? head_dim / kKvQuantBlock * KvBlockBytes(type) : head_dim * KvBlockBytes(type);
}

int64_t KvRowWidth(KvType type, int64_t head_dim) {
  return IsQuantized(type) ? KvRowBytes(type, head_dim) : head_dim;
}

const char* KvTypeName(KvType type) {
  switch (type) {
    case KvType::kF32: return "float32";
    case KvType::kF16: return "float16";
    case KvType::kBF16: return "bfloat16";
    case KvType::kQ8_0: return "q8_0";
    case KvType::kQ4_0: return "q4_0";
  }
  return "?";
}

KvType KvTypeOf(const Tensor& cache, int64_t head_dim, const char* op, const char* arg) {
  const int64_t width = cache.ndim() == 4 ? cache.dim(3) : -1;
  switch (cache.dtype()) {
    case DType::kF32: if (width == head_dim) return KvType::kF32; break;
    case DType::kF16: if (width == head_dim) return KvType::kF16; break;
    case DType::kBF16: if (width == head_dim) return KvType::kBF16; break;
    case DType::kU8:
      if (head_dim > 0 && head_dim % kKvQuantBlock == 0) {
        if (width == KvRowBytes(KvType::kQ8_0, head_dim)) return KvType::kQ8_0;
        if (width == KvRowBytes(KvType::kQ4_0, head_dim)) return KvType::kQ4_0;
      }
      break;
    default: break;
  }
  std::string expected = "[num_blocks, block_size, kv_heads, " + std::to_string(head_dim) +
                         "] of float32, float16 or bfloat16";
  if (head_dim > 0 && head_dim % kKvQuantBlock == 0)
    expected += ", or uint8 [num_blocks, block_size, kv_heads, " + std::to_string(KvRowBytes(KvType::kQ8_0, head_dim)) +
                " (q8_0) or " + std::to_string(KvRowBytes(KvType::kQ4_0, head_dim)) + " (q4_0)]";
  else
    expected += " (q8_0 / q4_0 caches need head_dim a multiple of 32)";
  throw std::invalid_argument(std::string("[") + op + "] " + arg + " must be " + expected + " to hold rows of " +
                              std::to_string(head_dim) + " features, got " + DTypeName(cache.dtype()) + " " +
                              ShapeToString(cache.shape()));
}

}  // namespace metalrt
