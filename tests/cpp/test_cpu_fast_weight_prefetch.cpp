// Gates of the GEMV weight prefetch (cpu/fast/gemv/weight_prefetch.h): the spans a call's
// chunks read first, and the successor it learns: the reads of the call that came
// after this one last time are what the idle threads fetch while it runs.
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "cpu/fast/gemv/weight_prefetch.h"
#include "metalrt/quantized.h"

using namespace metalrt;
using cpu::fast::AddChunkReads;
using cpu::fast::GemvReads;
using cpu::fast::kPrefetchSpanBytes;

namespace {

// A Q4_1 weight [rows, 576]: 360 bytes a row.
QuantizedTensor Q41(int64_t rows) {
  return MakeQuantizedTensor(QuantFormat::kQ4_1, rows, 576, Tensor::Empty({rows, 360}, DType::kU8, DeviceType::kCPU));
}

const uint8_t* Row(const QuantizedTensor& w, int64_t row) { return w.data.data_as<uint8_t>() + row * 360; }

// The pieces the pool's idle threads have prefetched of the last published spans, once
// they reach `pieces` or a long wait passes (loops give a worker its polls), and after
// 100 loops more, so a piece too many would show.
int64_t Drained(int64_t pieces) {
  for (int i = 0; i < 100000 && cpu::IdlePrefetchedPieces() < pieces; ++i) cpu::ParallelFor(2, 1, [](int64_t, int64_t) {});
  for (int i = 0; i < 100; ++i) cpu::ParallelFor(2, 1, [](int64_t, int64_t) {});
  return cpu::IdlePrefetchedPieces();
}

}  // namespace

TEST_CASE("weight prefetch: each chunk's first rows, capped at kPrefetchSpanBytes") {
  int count;
  // gate|up [3072, 576] as the SwiGLU provider splits it: loop index i reads gate row i
  // and up row 1536 + i.
  const QuantizedTensor gate_up = Q41(3072);
  const int64_t size = cpu::ParallelChunkSize(1536, 32, &count);
  GemvReads reads;
  AddChunkReads(&reads, gate_up, 1536, 32, 0, 1536, 0);
  AddChunkReads(&reads, gate_up, 1536, 32, 0, 1536, 1536);
  // Gate's chunks, then up's, as far as kMaxPrefetchSpans holds (on more than 4 threads
  // the gate's chunks alone fill it).
  REQUIRE(reads.count == std::min(2 * count, cpu::kMaxPrefetchSpans));
  for (int i = 0; i < reads.count; ++i) {
    const int64_t row = i < count ? i * size : 1536 + (i - count) * size;
    CHECK(reads.spans[i].begin == Row(gate_up, row));
    CHECK(reads.spans[i].end == Row(gate_up, row) + std::min<int64_t>(size * 360, kPrefetchSpanBytes));
  }
  // q|k|v [576 | 192 | 192] over one loop of 960 columns: a chunk reads each weight
  // it overlaps from the first row it reaches, and no further than its own rows.
  const QuantizedTensor q = Q41(576), k = Q41(192), v = Q41(192);
  const int64_t first[4] = {0, 576, 768, 960};
  const QuantizedTensor* qkv[3] = {&q, &k, &v};
  GemvReads fused;
  for (int j = 0; j < 3; ++j) AddChunkReads(&fused, *qkv[j], 960, 64, first[j], first[j + 1], 0);
  const int64_t chunk = cpu::ParallelChunkSize(960, 64, &count);
  std::vector<const void*> expected;
  for (int j = 0; j < 3; ++j)
    for (int c = 0; c < count; ++c) {
      const int64_t lo = std::max(first[j], c * chunk), hi = std::min(first[j + 1], (c + 1) * chunk);
      if (lo < hi) expected.push_back(Row(*qkv[j], lo - first[j]));
    }
  expected.resize(std::min<size_t>(expected.size(), cpu::kMaxPrefetchSpans));
  REQUIRE(fused.count == int(expected.size()));
  for (int i = 0; i < fused.count; ++i) CHECK(fused.spans[i].begin == expected[i]);
  if (count == 2) {   // chunk 1 of q ends at q's last row: 96 rows, under the cap
    CHECK(fused.spans[1].begin == Row(q, 480));
    CHECK(fused.spans[1].end == Row(q, 576));
  }
}

TEST_CASE("weight prefetch: a call prefetches the reads of the call that followed it last time") {
  std::vector<uint8_t> a(3 * cpu::kPrefetchPieceBytes), b(5 * cpu::kPrefetchPieceBytes);
  GemvReads reads_a, reads_b;
  reads_a.spans[reads_a.count++] = {a.data(), a.data() + a.size()};
  reads_b.spans[reads_b.count++] = {b.data(), b.data() + b.size()};
  const bool pooled = cpu::ParallelThreadCount() > 1;
  cpu::fast::AnnounceGemv(a.data(), reads_a);
  cpu::fast::AnnounceGemv(b.data(), reads_b);   // learns: b follows a
  cpu::fast::AnnounceGemv(a.data(), reads_a);   // learns: a follows b; prefetches b's reads
  CHECK(Drained(5) == (pooled ? 5 : 0));
  cpu::fast::AnnounceGemv(b.data(), reads_b);   // prefetches a's reads
  CHECK(Drained(3) == (pooled ? 3 : 0));
}

TEST_CASE("weight prefetch: successors are learned per calling thread") {
  std::vector<uint8_t> a(2 * cpu::kPrefetchPieceBytes), b(4 * cpu::kPrefetchPieceBytes), c(cpu::kPrefetchPieceBytes);
  GemvReads reads_a, reads_b, reads_c;
  reads_a.spans[reads_a.count++] = {a.data(), a.data() + a.size()};
  reads_b.spans[reads_b.count++] = {b.data(), b.data() + b.size()};
  reads_c.spans[reads_c.count++] = {c.data(), c.data() + c.size()};
  const bool pooled = cpu::ParallelThreadCount() > 1;
  cpu::fast::AnnounceGemv(a.data(), reads_a);
  cpu::fast::AnnounceGemv(b.data(), reads_b);   // this thread: b follows a
  // Another thread announces a then c: its own successor, not this thread's.
  std::thread other([&] {
    cpu::fast::AnnounceGemv(a.data(), reads_a);
    cpu::fast::AnnounceGemv(c.data(), reads_c);
  });
  other.join();
  cpu::fast::AnnounceGemv(a.data(), reads_a);   // prefetches b's 4 pieces, not c's 1
  CHECK(Drained(4) == (pooled ? 4 : 0));
}

