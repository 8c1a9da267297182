#include "cpu/fast/gemv/weight_prefetch.h"

#include <algorithm>
#include <cstddef>
#include <memory>

namespace metalrt::cpu::fast {
namespace {

// Successors by key, per calling thread: a decode step's GEMVs are called from one
// thread, 121 of them for the default model, so a fixed direct-mapped table serves
// them without a lock or an allocation (a mutex and a hash map cost ~0.3 us a call,
// ~1% of a decode step), and two engines on two threads never overwrite each other's
// predictions. A key whose slot another key took has no successor: no prefetch, never
// a wrong value.
constexpr int kSlotBits = 9;
constexpr size_t kSlots = size_t{1} << kSlotBits;

struct Successor {
  const void* key = nullptr;
  GemvReads reads;
};

struct Successors {
  Successor slots[kSlots];
  const void* last = nullptr;
  Successor& SlotOf(const void* key) {
    // Fibonacci hashing of the address above its cache line: weights are distinct
    // allocations, so their addresses differ in the high bits too.
    const uint64_t h = (static_cast<uint64_t>(reinterpret_cast<uintptr_t>(key)) >> 6) * 0x9E3779B97F4A7C15ull;
    return slots[h >> (64 - kSlotBits)];
  }
};

// On the heap (74 KB), made by the first GEMV a thread calls: threads that never call
// one (the pool's workers, BLAS's) carry none of it.
Successors& TheSuccessors() {
  thread_local std::unique_ptr<Successors> s;
  if (!s) s = std::make_unique<Successors>();
  return *s;
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
  if (s.last != nullptr && s.last != key) {
    Successor& slot = s.SlotOf(s.last);
    slot.key = s.last;
    slot.reads = reads;
  }
  s.last = key;
  const Successor& next = s.SlotOf(key);
  if (next.key == key) PrefetchWhileIdle(next.reads.spans, next.reads.count);
}

void AnnounceRows(const QuantizedTensor& w, int64_t n, int64_t min_chunk) {
  GemvReads reads;
  AddChunkReads(&reads, w, n, min_chunk, 0, n, 0);
  AnnounceGemv(w.data.data(), reads);
}

}  // namespace metalrt::cpu::fast
