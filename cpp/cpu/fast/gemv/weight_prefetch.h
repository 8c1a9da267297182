// The weights of the next quantized GEMV of a decode step, fetched while the pool's
// threads would otherwise poll. Between two GEMVs the step runs work on one thread
// (RMSNorm, the activation's quantization, the host's Python between steps) or short
// of bandwidth (attention): the memory bus idles while every weight still has to come
// from memory. Each GEMV call announces what its chunks read first; the call that
// came after it last time (a decode step repeats its calls in order) is the one whose
// reads are prefetched while it runs and after (parallel.h, PrefetchWhileIdle), so
// the next call starts on weights in the caches. A wrong guess (another model, a
// first step) costs bandwidth, never a value.
#pragma once
#include <cstdint>

#include "cpu/parallel.h"
#include "metalrt/quantized.h"

namespace metalrt::cpu::fast {

// Bytes read ahead per chunk start: what a gap between two GEMVs (~1-10 us, at
// ~15 GB/s a core) can fetch, and well inside a core's L2 with the current GEMV's.
inline constexpr int64_t kPrefetchSpanBytes = 64 * 1024;

// What one GEMV call's pool chunks read first.
struct GemvReads {
  int count = 0;
  PrefetchSpan spans[kMaxPrefetchSpans];
};

// Adds to `reads` the first kPrefetchSpanBytes of weight w that each chunk of
// ParallelFor(n, min_chunk) reads for its loop indices in [lo, hi), index lo reading
// row `row_of_lo` of w and the rows after it in order.
void AddChunkReads(GemvReads* reads, const QuantizedTensor& w, int64_t n, int64_t min_chunk, int64_t lo, int64_t hi,
                   int64_t row_of_lo);

// Called by a fast GEMV provider just before its parallel loop, with its own reads
// and a key for the call (its first weight's data): records these reads as what
// follows the previous call announced on this thread, and asks the pool's idle
// threads for the reads recorded (on this thread) as following this one.
void AnnounceGemv(const void* key, const GemvReads& reads);

// AnnounceGemv for a loop ParallelFor(n, min_chunk) over rows 0 .. n - 1 of w in order
// (the plain and the +residual GEMV), keyed by w's data.
void AnnounceRows(const QuantizedTensor& w, int64_t n, int64_t min_chunk);

}  // namespace metalrt::cpu::fast
