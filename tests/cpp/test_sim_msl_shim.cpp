// The MSL semantics suite for the shim's parts (tests/msl/*.metal), run through
// the simulated device in three fiber orders: SIMD/quad functions over partial
// SIMD-groups and returned lanes, atomics across threadgroups and in threadgroup
// memory, simdgroup-matrix multiply with origins and transposes, half/bfloat
// rounding, swizzles. References are computed here (float64 / integers); inputs
// are chosen so results are exact and so the same checks hold on a real Mac.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "float16_reference.h"
#include "sim_testing.h"

using namespace metalrt;
using namespace float16_reference;

namespace {

using testing::SimOrders;
using testing::SimRun;

SimRun& suite() {
  static SimRun s;
  return s;
}

// Runs one dispatch and requires it to complete.
void Run(const std::string& kernel, std::vector<std::shared_ptr<gpu::GpuBuffer>> buffers,
         gpu::Size3 grid, gpu::Size3 group, bool grid_is_threads = true) {
  const std::string error = suite().Run({kernel, std::move(buffers), grid, group, grid_is_threads});
  REQUIRE_MESSAGE(error.empty(), error);
}

template <class T>
std::shared_ptr<gpu::GpuBuffer> Value(T v) {
  return suite().Buffer(std::vector<T>{v});
}

// The lanes of a 1-D dispatch of n threads in groups of `group`: which threads
// share a SIMD-group (32 consecutive threads of a threadgroup) and their lanes.
struct SimdGroups {
  uint32_t n, group;
  uint32_t Lane(uint32_t gid) const { return (gid % group) % 32; }
  uint32_t First(uint32_t gid) const { return gid - Lane(gid); }   // lane 0's thread
  // Thread of lane l in gid's SIMD-group, or -1 when that lane does not exist.
  int64_t At(uint32_t gid, uint32_t l) const {
    const uint32_t group_end = std::min(n, (gid / group + 1) * group);
    const uint32_t t = First(gid) + l;
    return l < 32 && t < group_end ? int64_t(t) : -1;
  }
};

bool Returns(uint32_t gid) { return gid % 7 == 5; }   // the kernels' early return

uint32_t Hash(uint32_t i) { return (i * 2654435761u) ^ (i >> 3); }

std::vector<float> Poisoned(size_t count) { return std::vector<float>(count, NAN); }

}  // namespace

TEST_CASE("MSL suite: SIMD and quad reductions over partial SIMD-groups and returned lanes") {
  SimRun& s = suite();
  // {threads, threadgroup size}: partial SIMD-groups inside threadgroups of 48 and
  // 40, an edge threadgroup of 4 threads, and one SIMD-group of 33.
  for (const std::pair<uint32_t, uint32_t>& shape : {std::pair<uint32_t, uint32_t>{100, 48}, {120, 40}, {33, 33}}) {
    const uint32_t n = shape.first, group = shape.second;
    for (const std::string& order : SimOrders()) {
      CAPTURE(n);
      CAPTURE(group);
      CAPTURE(order);
      const testing::ScopedFiberOrder scoped(order);
      const SimdGroups g{n, group};
      // Values ±{0.5, 1, 2}: every sum and product is exact in any order.
      std::vector<float> in(n);
      for (uint32_t i = 0; i < n; ++i) in[i] = std::ldexp(Hash(i) % 5 < 2 ? -1.0f : 1.0f, int(i * 5 % 3) - 1);
      std::vector<uint32_t> uin(n);
      for (uint32_t i = 0; i < n; ++i) uin[i] = Hash(i) % 1000003 + (i % 11 == 0 ? 0 : 1);
      auto fout = s.Buffer(Poisoned(12 * n));
      auto uout = s.Buffer(std::vector<uint32_t>(13 * n, 0xdeadbeefu));
      Run("simd_reduce_f32", {s.Buffer(in), fout, Value(n)}, {n, 1, 1}, {group, 1, 1});
      Run("simd_reduce_u32", {s.Buffer(uin), uout, Value(n)}, {n, 1, 1}, {group, 1, 1});
      const std::vector<float> f = SimRun::Read<float>(*fout);
      const std::vector<uint32_t> u = SimRun::Read<uint32_t>(*uout);
      for (uint32_t gid = 0; gid < n; ++gid) {
        CAPTURE(gid);
        if (Returns(gid)) {
          CHECK(std::isnan(f[gid]));   // a returned thread wrote nothing
          continue;
        }
        double sum = 0, prod = 1, mx = -INFINITY, mn = INFINITY, incl = 0, iprod = 1, first = NAN;
        double excl = 0, eprod = 1, quad = 0;
        uint32_t band = ~0u, bor = 0, bxor = 0, umin = ~0u, umax = 0, usum = 0, all_nz = 1, any999 = 0;
        uint32_t ballot = 0, active = 0, qmax = 0;
        int32_t smin = INT32_MAX;
        int64_t lowest = -1;
        for (uint32_t l = 0; l < 32; ++l) {
          const int64_t t = g.At(gid, l);
          if (t < 0 || Returns(uint32_t(t))) continue;
          const double v = in[t];
          const uint32_t w = uin[t];
          if (lowest < 0) lowest = t, first = v;
          sum += v, prod *= v, mx = std::max(mx, v), mn = std::min(mn, v);
          if (l <= g.Lane(gid)) incl += v, iprod *= v;
          if (l < g.Lane(gid)) excl += v, eprod *= v;
          if (l / 4 == g.Lane(gid) / 4) quad += v, qmax = std::max(qmax, w);
          band &= w, bor |= w, bxor ^= w, umin = std::min(umin, w), umax = std::max(umax, w), usum += w;
          all_nz &= w != 0, any999 |= w % 1000 == 999;
          ballot |= uint32_t(w & 1u) << l, active |= 1u << l;
          smin = std::min(smin, int32_t(w) - 500000);
        }
        const double want_f[12] = {sum, prod, mx, mn, incl, excl, iprod, eprod, first, quad, 0, double(__builtin_popcount(active))};
        for (int k = 0; k < 12; ++k) {
          CAPTURE(k);
          CHECK(f[k * n + gid] == want_f[k]);
        }
        const uint32_t want_u[13] = {band, bor, bxor, umin, umax, usum, all_nz, any999, ballot,
                                     uint32_t(int64_t(gid) == lowest), active, qmax, uint32_t(smin)};
        for (int k = 0; k < 13; ++k) {
          CAPTURE(k);
          CHECK(u[k * n + gid] == want_u[k]);
        }
      }
    }
  }
}

TEST_CASE("MSL suite: SIMD and quad shuffles, edge lanes and partial SIMD-groups") {
  SimRun& s = suite();
  const uint32_t n = 90, group = 45;   // SIMD-groups of 32 and 13 lanes
  const SimdGroups g{n, group};
  std::vector<float> in(n);
  for (uint32_t i = 0; i < n; ++i) in[i] = float(i) * 0.5f - 7.0f;
  for (const std::string& order : SimOrders()) {
    const testing::ScopedFiberOrder scoped(order);
    for (uint16_t delta : {0, 1, 3, 8, 13, 31}) {
      CAPTURE(order);
      CAPTURE(delta);
      auto out = s.Buffer(Poisoned(11 * n));
      Run("simd_shuffles_f32", {s.Buffer(in), out, Value(n), Value(delta)},
            {n, 1, 1}, {group, 1, 1});
      const std::vector<float> f = SimRun::Read<float>(*out);
      for (uint32_t gid = 0; gid < n; ++gid) {
        CAPTURE(gid);
        const uint32_t lane = g.Lane(gid);
        // Checks output k when lane `source` of this SIMD-group exists (reading a
        // lane that does not is undefined on the GPU).
        auto expect_from = [&](int k, int64_t source_lane) {
          const int64_t t = source_lane < 0 ? -1 : g.At(gid, uint32_t(source_lane));
          if (t >= 0) CHECK(f[k * n + gid] == in[t]);
        };
        expect_from(0, (lane * 5 + delta) % 32);
        if (delta > lane) CHECK(f[1 * n + gid] == in[gid]);   // no source: own value
        else expect_from(1, lane - delta);
        if (lane + delta >= 32) CHECK(f[2 * n + gid] == in[gid]);
        else expect_from(2, lane + delta);
        expect_from(3, (lane + 32 - delta % 32) % 32);
        expect_from(4, (lane + delta) % 32);
        expect_from(5, lane ^ delta);
        expect_from(6, delta % 8);
        expect_from(7, (lane & ~3u) + delta % 4);
        expect_from(8, lane ^ (delta % 4));
        const int64_t down = lane + delta >= 32 ? gid : g.At(gid, lane + delta);
        if (down >= 0) {
          CHECK(f[9 * n + gid] == 0.0f);
          CHECK(f[10 * n + gid] == float(g.Lane(uint32_t(down))));
        }
      }
    }
  }
}

TEST_CASE("MSL suite: device and threadgroup atomics across concurrent threadgroups") {
  SimRun& s = suite();
  const uint32_t n = 6000, nbins = 37, group = 64;
  std::vector<uint32_t> values(n);
  for (uint32_t i = 0; i < n; ++i) values[i] = 1000000 + Hash(i) % 900001 - 450000;
  for (const std::string& order : SimOrders()) {
    CAPTURE(order);
    const testing::ScopedFiberOrder scoped(order);
    auto bins = s.Buffer(std::vector<uint32_t>(nbins, 0));
    auto total = s.Buffer(std::vector<float>{0.0f});
    auto extremes = s.Buffer(std::vector<int32_t>{INT32_MAX, INT32_MIN});
    auto seen = s.Buffer(std::vector<uint32_t>{0});
    auto high = s.Buffer(std::vector<uint32_t>{0});
    Run("atomic_device_ops",
          {s.Buffer(values), bins, Value(nbins), total, extremes, seen, high}, {n, 1, 1},
          {group, 1, 1});
    std::vector<uint32_t> want_bins(nbins, 0);
    uint32_t want_seen = 0, want_high = 0;
    int32_t lo = INT32_MAX, hi = INT32_MIN;
    for (uint32_t v : values) {
      ++want_bins[v % nbins];
      want_seen |= 1u << (v % 32);
      want_high = std::max(want_high, v);
      lo = std::min(lo, int32_t(v) - 1000000);
      hi = std::max(hi, int32_t(v) - 1000000);
    }
    CHECK(SimRun::Read<uint32_t>(*bins) == want_bins);
    CHECK(SimRun::Read<float>(*total)[0] == 0.25f * n);
    CHECK(SimRun::Read<int32_t>(*extremes) == std::vector<int32_t>{lo, hi});
    CHECK(SimRun::Read<uint32_t>(*seen)[0] == want_seen);
    CHECK(SimRun::Read<uint32_t>(*high)[0] == want_high);

    const uint32_t groups = 23, tg = 96;
    auto counts = s.Buffer(std::vector<uint32_t>(groups, 0xdeadbeefu));
    auto sum = s.Buffer(std::vector<float>{0.0f});
    Run("atomic_threadgroup_count", {s.Buffer(values), counts, sum}, {groups, 1, 1}, {tg, 1, 1}, false);
    const std::vector<uint32_t> got = SimRun::Read<uint32_t>(*counts);
    double want_sum = 0;
    for (uint32_t grp = 0; grp < groups; ++grp) {
      uint32_t c = 0;
      for (uint32_t i = grp * tg; i < (grp + 1) * tg; ++i)
        if (values[i] % 3 == 0) ++c, want_sum += values[i] % 64;
      CHECK(got[grp] == c);
    }
    CHECK(SimRun::Read<float>(*sum)[0] == want_sum);
  }
}

namespace {

struct MatmulShape {
  uint32_t m, n, k, lda, ldb, ldc, b_transposed, c_transposed;
};

// 16-bit storage helpers for the matmul inputs: exact values only.
uint16_t HalfBitsOf(double v) { return RefHalfBits(v); }
uint16_t BfloatBitsOf(double v) { return RefBfloatBits(v); }
double BfloatValue(uint16_t bits) {
  const double v = Bfloat16Value(bits & 0x7fff);
  return (bits & 0x8000) ? -v : v;
}

// Runs sg_matmul_<type> on A (m x k) and B (k x n) given as exact float64 values
// and returns C (m x n) read back as float64; elements outside C must stay poisoned.
template <class Storage>
std::vector<double> RunMatmul(const std::string& type, const MatmulShape& sh,
                              const std::vector<double>& a, const std::vector<double>& b,
                              Storage (*encode)(double), double (*decode)(Storage), Storage poison) {
  SimRun& s = suite();
  std::vector<Storage> A(sh.m * sh.lda, poison), B((sh.b_transposed ? sh.n : sh.k) * sh.ldb, poison);
  for (uint32_t r = 0; r < sh.m; ++r)
    for (uint32_t c = 0; c < sh.k; ++c) A[r * sh.lda + c] = encode(a[r * sh.k + c]);
  for (uint32_t r = 0; r < sh.k; ++r)
    for (uint32_t c = 0; c < sh.n; ++c)
      (sh.b_transposed ? B[c * sh.ldb + r] : B[r * sh.ldb + c]) = encode(b[r * sh.n + c]);
  const uint32_t c_rows = sh.c_transposed ? sh.n : sh.m;
  auto cbuf = s.Buffer(std::vector<Storage>(c_rows * sh.ldc, poison));
  Run("sg_matmul_" + type, {s.Buffer(A), s.Buffer(B), cbuf, Value(sh)},
        {sh.n / 8, sh.m / 8, 1}, {32, 1, 1}, false);
  const std::vector<Storage> C = SimRun::Read<Storage>(*cbuf);
  std::vector<double> out(sh.m * sh.n);
  for (uint32_t r = 0; r < sh.m; ++r)
    for (uint32_t c = 0; c < sh.n; ++c)
      out[r * sh.n + c] = decode(sh.c_transposed ? C[c * sh.ldc + r] : C[r * sh.ldc + c]);
  size_t untouched = 0;
  for (const Storage& v : C) untouched += std::memcmp(&v, &poison, sizeof(v)) == 0;
  CHECK(untouched == C.size() - size_t(sh.m) * sh.n);
  return out;
}

}  // namespace

TEST_CASE("MSL suite: simdgroup-matrix multiply with origins, transposed B and C, float/half/bfloat") {
  std::mt19937 rng(23);
  for (const std::string& order : SimOrders()) {
    const testing::ScopedFiberOrder scoped(order);
    for (uint32_t bt : {0u, 1u}) {
      for (uint32_t ct : {0u, 1u}) {
        CAPTURE(order);
        CAPTURE(bt);
        CAPTURE(ct);
        const uint32_t m = 24, n = 16, k = 32;
        const MatmulShape sh{m, n, k, k + 3, bt ? k + 1 : n + 5, ct ? m + 3 : n + 2, bt, ct};
        // Entries are small multiples of a power of two, so every partial sum is
        // exact in the storage type and the result does not depend on the order
        // of accumulation: j/8, |j| <= 4 (half, float) and j/4, |j| <= 2 (bfloat).
        auto matrix = [&](size_t count, int range, double scale) {
          std::vector<double> v(count);
          std::uniform_int_distribution<int> d(-range, range);
          for (double& x : v) x = d(rng) * scale;
          return v;
        };
        const std::vector<double> a = matrix(m * k, 4, 0.125), b = matrix(k * n, 4, 0.125);
        const std::vector<double> ab = matrix(m * k, 2, 0.25), bb = matrix(k * n, 2, 0.25);
        auto reference = [&](const std::vector<double>& x, const std::vector<double>& y) {
          std::vector<double> c(m * n, 0.0);
          for (uint32_t r = 0; r < m; ++r)
            for (uint32_t col = 0; col < n; ++col)
              for (uint32_t i = 0; i < k; ++i) c[r * n + col] += x[r * k + i] * y[i * n + col];
          return c;
        };
        const std::vector<double> want = reference(a, b), want_b = reference(ab, bb);
        CHECK(RunMatmul<float>("float", sh, a, b, [](double v) { return float(v); },
                               [](float v) { return double(v); }, NAN) == want);
        CHECK(RunMatmul<uint16_t>("half", sh, a, b, HalfBitsOf, HalfValue, 0x7e00) == want);
        CHECK(RunMatmul<uint16_t>("bfloat", sh, ab, bb, BfloatBitsOf, BfloatValue, 0x7fc0) == want_b);
      }
    }
  }
}

TEST_CASE("MSL suite: simdgroup-matrix lane layout and diagonal constructor") {
  SimRun& s = suite();
  std::vector<float> b(64);
  for (int i = 0; i < 64; ++i) b[i] = float(i) - 20.5f;
  auto product = s.Buffer(Poisoned(64)), owner = s.Buffer(Poisoned(64));
  Run("sg_layout", {s.Buffer(b), product, owner}, {1, 1, 1}, {32, 1, 1}, false);
  const std::vector<float> p = SimRun::Read<float>(*product), o = SimRun::Read<float>(*owner);
  for (int i = 0; i < 64; ++i) CHECK(p[i] == 2.0f * b[i]);
  for (uint32_t l = 0; l < 32; ++l) {
    const uint32_t row = 4 * ((l >> 4) & 1) + 2 * ((l >> 2) & 1) + ((l >> 1) & 1);
    const uint32_t col = 4 * ((l >> 3) & 1) + 2 * (l & 1);
    CHECK(o[row * 8 + col] == float(l));
    CHECK(o[row * 8 + col + 1] == float(l) + 0.5f);
  }
}

TEST_CASE("MSL suite: half and bfloat arithmetic rounds each operation to nearest even") {
  SimRun& s = suite();
  std::mt19937 rng(29);
  const uint32_t n = 4099;
  for (const bool is_half : {true, false}) {
    CAPTURE(is_half);
    // Finite, nonzero operands: every half from subnormal to near-overflow; bfloats
    // within 2^+-63, whose results stay normal (GPUs may flush float subnormals).
    std::uniform_int_distribution<uint32_t> bits(is_half ? 0x0001 : 0x2000, is_half ? 0x7bff : 0x5f7f);
    std::vector<uint16_t> a(n), b(n);
    for (uint32_t i = 0; i < n; ++i) {
      a[i] = uint16_t(bits(rng) | (rng() & 1 ? 0x8000 : 0));
      b[i] = uint16_t(bits(rng) | (rng() & 1 ? 0x8000 : 0));
    }
    auto out = s.Buffer(std::vector<uint16_t>(4 * n, 0xffff));
    Run(is_half ? "arith16_half" : "arith16_bfloat", {s.Buffer(a), s.Buffer(b), out}, {n, 1, 1}, {64, 1, 1});
    const std::vector<uint16_t> got = SimRun::Read<uint16_t>(*out);
    auto value = [&](uint16_t v) { return is_half ? HalfValue(v) : BfloatValue(v); };
    auto round = [&](double v) { return is_half ? RefHalfBits(v) : RefBfloatBits(v); };
    for (uint32_t i = 0; i < n; ++i) {
      CAPTURE(i);
      const double x = value(a[i]), y = value(b[i]);
      CHECK(got[4 * i + 2] == round(x * y));   // exact in float64
      CHECK(got[4 * i + 3] == round(x / y));   // rounding from float64 is innocuous
      // x + y and x - y are exact in float64 when the exponents are < 40 apart.
      if (std::abs(std::ilogb(x) - std::ilogb(y)) < 40) {
        CHECK(got[4 * i + 0] == round(x + y));
        CHECK(got[4 * i + 1] == round(x - y));
      }
    }
  }
  // float -> half / bfloat: exact ties between neighbours, and their neighbours.
  std::vector<float> in;
  for (uint32_t k = 0; k < 0x7bff; k += 97) {
    const float mid = float((Binary16Value(k) + Binary16Value(k + 1)) / 2);
    in.insert(in.end(), {mid, std::nextafter(mid, 0.0f), -std::nextafter(mid, INFINITY)});
  }
  in.insert(in.end(), {65520.0f, 65519.0f, 1e30f, 3.4e38f, std::ldexp(1.0f, -25), std::ldexp(3.0f, -26)});
  const uint32_t m = uint32_t(in.size());
  auto hb = s.Buffer(std::vector<uint16_t>(m, 0)), bb = s.Buffer(std::vector<uint16_t>(m, 0));
  Run("narrow16", {s.Buffer(in), hb, bb}, {m, 1, 1}, {32, 1, 1});
  const std::vector<uint16_t> h = SimRun::Read<uint16_t>(*hb), bf = SimRun::Read<uint16_t>(*bb);
  for (uint32_t i = 0; i < m; ++i) {
    CAPTURE(in[i]);
    CHECK(h[i] == RefHalfBits(in[i]));
    CHECK(bf[i] == RefBfloatBits(in[i]));
  }
}

TEST_CASE("MSL suite: swizzles, vector constructors, packed vectors, select") {
  SimRun& s = suite();
  const uint32_t n = 37;
  std::vector<float> in(4 * n);
  for (uint32_t i = 0; i < 4 * n; ++i) in[i] = float(int(Hash(i) % 200) - 100) * 0.25f;
  auto out = s.Buffer(Poisoned(12 * n)), packed = s.Buffer(Poisoned(3 * n));
  auto ints = s.Buffer(std::vector<uint32_t>(4 * n, 0xdeadbeefu));
  Run("swizzles", {s.Buffer(in), out, packed, ints}, {n, 1, 1}, {16, 1, 1});
  const std::vector<float> o = SimRun::Read<float>(*out), p = SimRun::Read<float>(*packed);
  const std::vector<uint32_t> u = SimRun::Read<uint32_t>(*ints);
  for (uint32_t i = 0; i < n; ++i) {
    CAPTURE(i);
    const float x = in[4 * i], y = in[4 * i + 1], z = in[4 * i + 2], w = in[4 * i + 3];
    const std::vector<float> got(o.begin() + 12 * i, o.begin() + 12 * i + 12);
    // Quarter-integers below 25 in magnitude are exact in half.
    CHECK(got == std::vector<float>{z + w, w, y, x, z, y, x, 2 * w, w, y, z, x});
    CHECK(std::vector<float>(p.begin() + 3 * i, p.begin() + 3 * i + 3) ==
          std::vector<float>{x + 1, y + 1, z + 1});
    uint32_t xbits;
    std::memcpy(&xbits, &x, 4);
    const uint32_t want[4] = {xbits, i << 1, (x < 0 ? 7u : uint32_t(z > 0)) << 2, uint32_t(w > 0) << 3};
    for (int c = 0; c < 4; ++c) CHECK(u[4 * i + c] == want[c]);
  }
}
