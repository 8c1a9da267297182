#include "cpu/fast/weight_prefetch.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace metalrt::cpu::fast {
namespace {

// Successors by key, bounded: a process loading model after model forgets the old
// ones' weights instead of growing (a decode step of the default model has 121 keys).
constexpr size_t kMaxKeys = 4096;

struct Successors {
  std::mutex mutex;
  std::unordered_map<const void*, GemvReads> next;
  const void* last = nullptr;
};

Successors& TheSuccessors() {
  static Successors s;
  return s;
}

}  // namespace

void AddChunkReads(GemvReads* reads, const QuantizedTensor& w, int64_t n, int64_t min_chunk, int64_t lo, int64_t hi,
                   int64_t row_of_lo) {
  int count;
  const int64_t size = ParallelChunkSize(n, min_chunk, &count);
  const auto* data = w.data.data_as<uint8_t>();
  const int64_t row_bytes = static_cast<int64_t>(w.data.nbytes()) / w.rows;
  for (int c = 0; c < count && reads->count < kMaxPrefetchSpans; ++c) {
    const int64_t begin = std::max(lo, c * size), end = std::min({hi, n, (c + 1) * size});
    if (begin >= end) continue;
    const uint8_t* first = data + (row_of_lo + begin - lo) * row_bytes;
    reads->spans[reads->count++] = {first, first + std::min((end - begin) * row_bytes, kPrefetchSpanBytes)};
  }
}

void AnnounceGemv(const void* key, const GemvReads& reads) {
  Successors& s = TheSuccessors();
  GemvReads next;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.last != nullptr && s.last != key) {
      if (s.next.size() >= kMaxKeys && !s.next.count(s.last)) s.next.clear();
      s.next[s.last] = reads;
    }
    s.last = key;
    const auto it = s.next.find(key);
    if (it == s.next.end()) return;
    next = it->second;
  }
  PrefetchWhileIdle(next.spans, next.count);
}

}  // namespace metalrt::cpu::fast
