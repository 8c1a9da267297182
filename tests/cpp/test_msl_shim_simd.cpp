// Gates of the MSL shim's SIMD-group functions and simdgroup matrices, run on a
// mock SIMD-group (msl_shim_mock.h: one std::thread per lane) against references
// computed here: full and partial SIMD-groups, edge lanes of shuffles, quads,
// matrix multiply with transpose and origin.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "msl_shim_mock.h"
#include "simdgroup_matrix.h"

using namespace metal;
using msl_shim_test::MockSimdGroup;

namespace {

constexpr uint32_t kFull = 0xffffffffu;

// Lane l's test value; distinct, exact in float, both signs.
float LaneValue(uint32_t l) { return float(int(l * 7 % 32) - 13) * 0.5f; }

bool Active(uint32_t mask, uint32_t l) { return l < 32 && ((mask >> l) & 1u); }

}  // namespace

TEST_CASE("simd reductions and scans over full and partial SIMD-groups") {
  // Full group, the first 13 lanes (a partial edge SIMD-group) and a sparse mask
  // (lanes that returned early).
  for (uint32_t mask : {kFull, (1u << 13) - 1, 0x80a5f00fu, 1u}) {
    CAPTURE(mask);
    float sum = 0, prod = 1, mx = -INFINITY, mn = INFINITY;
    uint32_t band = 0xffffffffu, bor = 0, bxor = 0;
    for (uint32_t l = 0; l < 32; ++l) {
      if (!Active(mask, l)) continue;
      sum += LaneValue(l);
      prod *= (l % 3 == 0 ? 2.0f : 1.0f);
      mx = std::max(mx, LaneValue(l));
      mn = std::min(mn, LaneValue(l));
      band &= ~(1u << l) | 1u;
      bor |= 1u << l;
      bxor ^= l * 2654435761u;
    }
    float got[32];
    float4 got4[32];
    float gotf[2][32];
    uint32_t gots[5][32];
    float incl[32], excl[32];
    std::fill(std::begin(got), std::end(got), NAN);
    MockSimdGroup::Run(mask, [&](uint32_t l) {
      got[l] = simd_sum(LaneValue(l));
      got4[l] = simd_sum(float4(LaneValue(l), 1.0f, float(l), 0));
      gotf[0][l] = simd_product(l % 3 == 0 ? 2.0f : 1.0f);
      gotf[1][l] = simd_max(LaneValue(l)) - simd_min(LaneValue(l));
      gots[2][l] = simd_and(~(1u << l) | 1u);
      gots[3][l] = simd_or(1u << l);
      gots[4][l] = simd_xor(l * 2654435761u);
      incl[l] = simd_prefix_inclusive_sum(LaneValue(l));
      excl[l] = simd_prefix_exclusive_sum(LaneValue(l));
    });
    float running = 0;
    for (uint32_t l = 0; l < 32; ++l) {
      if (!Active(mask, l)) continue;
      CAPTURE(l);
      CHECK(got[l] == sum);
      CHECK(all(got4[l] == float4(sum, float(__builtin_popcount(mask)), got4[l].z, 0)));
      CHECK(gotf[0][l] == prod);
      CHECK(gotf[1][l] == mx - mn);
      CHECK(gots[2][l] == band);
      CHECK(gots[3][l] == bor);
      CHECK(gots[4][l] == bxor);
      CHECK(excl[l] == running);
      running += LaneValue(l);
      CHECK(incl[l] == running);
    }
  }
}

TEST_CASE("simd shuffles: edge lanes keep their value, rotations wrap, inactive sources poison") {
  for (uint32_t mask : {kFull, (1u << 20) - 1}) {
    CAPTURE(mask);
    for (uint32_t delta : {0u, 1u, 5u, 16u, 31u}) {
      CAPTURE(delta);
      float up[32], down[32], rot_up[32], rot_down[32], xr[32], shuf[32], bcast[32];
      MockSimdGroup::Run(mask, [&](uint32_t l) {
        const float v = LaneValue(l);
        up[l] = simd_shuffle_up(v, delta);
        down[l] = simd_shuffle_down(v, delta);
        rot_up[l] = simd_shuffle_rotate_up(v, delta);
        rot_down[l] = simd_shuffle_rotate_down(v, delta);
        xr[l] = simd_shuffle_xor(v, delta);
        shuf[l] = simd_shuffle(v, (l * 3 + delta) % 32);
        bcast[l] = simd_broadcast(v, delta % 20);
      });
      // What lane l reads from lane `source`: its value when active, NaN (the
      // poison of an undefined read) when not.
      auto from = [&](uint32_t source) { return Active(mask, source) ? LaneValue(source) : NAN; };
      auto same = [](float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); };
      for (uint32_t l = 0; l < 32; ++l) {
        if (!Active(mask, l)) continue;
        CAPTURE(l);
        CHECK(same(up[l], l >= delta ? from(l - delta) : LaneValue(l)));
        CHECK(same(down[l], l + delta < 32 ? from(l + delta) : LaneValue(l)));
        CHECK(same(rot_up[l], from((l + 32 - delta) % 32)));
        CHECK(same(rot_down[l], from((l + delta) % 32)));
        CHECK(same(xr[l], from(l ^ delta)));
        CHECK(same(shuf[l], from((l * 3 + delta) % 32)));
        CHECK(same(bcast[l], from(delta % 20)));
      }
    }
  }
}

TEST_CASE("simd votes, first lane, broadcast_first; vectors and half through shuffles") {
  const uint32_t mask = 0xfff0fff0u;   // lanes 0..3 returned
  bool all_pos[32], any_big[32], first[32];
  uint64_t ballot[32], active[32];
  bool vote_all[32], vote_any[32], all_of_active[32];
  float bfirst[32];
  half4 hs[32];
  uint2 us[32];
  MockSimdGroup::Run(mask, [&](uint32_t l) {
    all_pos[l] = simd_all(l >= 4);
    any_big[l] = simd_any(l == 31);
    first[l] = simd_is_first();
    const simd_vote vote = simd_ballot(l % 2 == 0);
    ballot[l] = uint64_t(vote);
    vote_all[l] = vote.all();
    vote_any[l] = vote.any();
    all_of_active[l] = simd_ballot(true).all();
    active[l] = uint64_t(simd_active_threads_mask());
    bfirst[l] = simd_broadcast_first(LaneValue(l));
    hs[l] = simd_shuffle_down(half4(half(float(l)), half(0.5f), half(-1), half(l * 0.25f)), 2u);
    us[l] = simd_shuffle_xor(uint2(l, 100 + l), 1u).yx;
  });
  for (uint32_t l = 0; l < 32; ++l) {
    if (!Active(mask, l)) continue;
    CAPTURE(l);
    CHECK(all_pos[l]);
    CHECK(any_big[l]);
    CHECK(first[l] == (l == 4));
    CHECK(ballot[l] == (0x55555555u & mask));
    CHECK(!vote_all[l]);
    CHECK(vote_any[l]);
    CHECK(all_of_active[l]);   // all() counts only the lanes that voted
    CHECK(active[l] == mask);
    CHECK(bfirst[l] == LaneValue(4));
    const uint32_t src = l + 2 < 32 ? l + 2 : l;
    if (Active(mask, src)) {
      CHECK(float(hs[l].x) == float(src));
      CHECK(float(hs[l].w) == float(half(src * 0.25f)));
    } else {
      CHECK(std::isnan(float(hs[l].x)));
    }
    if (Active(mask, l ^ 1u)) CHECK(all(us[l] == uint2(100 + (l ^ 1u), l ^ 1u)));
  }
}

TEST_CASE("simd functions leave out lanes that return before reaching them") {
  // Lanes 3, 8, 13, ... return without taking part; they return late, so a
  // function that looked at the active mask before every lane had arrived or
  // returned would still count them.
  auto returns = [](uint32_t l) { return l % 5 == 3; };
  float sums[32], firsts[32];
  bool is_first[32];
  uint64_t masks[32];
  MockSimdGroup::Run(kFull & ~1u, [&](uint32_t l) {   // lane 0 does not exist either
    if (returns(l)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return;
    }
    sums[l] = simd_sum(LaneValue(l));
    is_first[l] = simd_is_first();
    firsts[l] = simd_broadcast_first(LaneValue(l));
    masks[l] = uint64_t(simd_active_threads_mask());
  });
  float want = 0;
  uint32_t mask = 0;
  for (uint32_t l = 1; l < 32; ++l)
    if (!returns(l)) want += LaneValue(l), mask |= 1u << l;
  for (uint32_t l = 1; l < 32; ++l) {
    if (returns(l)) continue;
    CAPTURE(l);
    CHECK(sums[l] == want);
    CHECK(is_first[l] == (l == 1));
    CHECK(firsts[l] == LaneValue(1));
    CHECK(masks[l] == mask);
  }
}

TEST_CASE("quad functions work within groups of 4 lanes") {
  const uint32_t mask = kFull & ~(1u << 6);   // lane 6 returned
  float sums[32], shuf[32], down[32], xr[32];
  bool firsts[32];
  MockSimdGroup::Run(mask, [&](uint32_t l) {
    sums[l] = quad_sum(LaneValue(l));
    shuf[l] = quad_shuffle(LaneValue(l), 3u);
    down[l] = quad_shuffle_down(LaneValue(l), 1u);
    xr[l] = quad_shuffle_xor(LaneValue(l), 2u);
    firsts[l] = quad_is_first();
  });
  for (uint32_t l = 0; l < 32; ++l) {
    if (!Active(mask, l)) continue;
    CAPTURE(l);
    const uint32_t base = l & ~3u;
    float s = 0;
    for (uint32_t i = base; i < base + 4; ++i)
      if (Active(mask, i)) s += LaneValue(i);
    CHECK(sums[l] == s);
    CHECK(shuf[l] == LaneValue(base + 3));
    if (l % 4 == 3) CHECK(down[l] == LaneValue(l));
    else if (Active(mask, l + 1)) CHECK(down[l] == LaneValue(l + 1));
    if (Active(mask, l ^ 2u)) CHECK(xr[l] == LaneValue(l ^ 2u));
    CHECK(firsts[l] == (l == base));
  }
}

namespace {

// C = A(8 x 8 block at origin) * B + bias, in float64, with A read transposed when asked.
void ReferenceMultiply(const std::vector<float>& a, size_t lda, ulong2 origin, bool transpose,
                       const std::vector<float>& b, const std::vector<float>& c, double* out) {
  for (int r = 0; r < 8; ++r)
    for (int col = 0; col < 8; ++col) {
      double acc = c[r * 8 + col];
      for (int k = 0; k < 8; ++k) {
        const size_t ia = transpose ? (origin.x + k) * lda + origin.y + r : (origin.y + r) * lda + origin.x + k;
        acc += double(a[ia]) * double(b[k * 8 + col]);
      }
      out[r * 8 + col] = acc;
    }
}

}  // namespace

TEST_CASE("simdgroup_matrix: lane layout, load/store with stride, origin and transpose") {
  // thread_elements() of lane l are row 4*l4 + 2*l2 + l1, columns 4*l3 + 2*l0 (+1).
  std::vector<float> src(8 * 8);
  for (int i = 0; i < 64; ++i) src[i] = float(i);
  float2 elems[32];
  MockSimdGroup::Run(kFull, [&](uint32_t l) {
    simdgroup_float8x8 m;
    simdgroup_load(m, src.data());
    elems[l] = m.thread_elements();
  });
  for (uint32_t l = 0; l < 32; ++l) {
    const int row = 4 * ((l >> 4) & 1) + 2 * ((l >> 2) & 1) + ((l >> 1) & 1);
    const int col = 4 * ((l >> 3) & 1) + 2 * (l & 1);
    CHECK(elems[l].x == float(row * 8 + col));
    CHECK(elems[l].y == float(row * 8 + col + 1));
  }
  // A 13 x 11 source (stride not a multiple of 8): load the block at origin
  // (column 3, row 5), store it into a 10-wide destination at (column 1, row 2),
  // once plain and once transposed both ways.
  const size_t lda = 11;
  std::vector<float> big(13 * lda);
  for (size_t i = 0; i < big.size(); ++i) big[i] = float(i) * 0.25f;
  for (bool transpose : {false, true}) {
    CAPTURE(transpose);
    std::vector<float> dst(12 * 10, NAN);
    MockSimdGroup::Run(kFull, [&](uint32_t) {
      simdgroup_float8x8 m;
      simdgroup_load(m, big.data(), lda, ulong2(3, 5), transpose);
      simdgroup_store(m, dst.data(), 10, ulong2(1, 2), transpose);
    });
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) {
        // Loaded element (r, c) is big[row 5 + r][col 3 + c] (or its transpose);
        // storing with the same transpose flag puts it back the same way round.
        const float want = transpose ? big[(3 + c) * lda + 5 + r] : big[(5 + r) * lda + 3 + c];
        const float got = transpose ? dst[(1 + c) * 10 + 2 + r] : dst[(2 + r) * 10 + 1 + c];
        CHECK(got == want);
      }
    size_t written = 0;
    for (float v : dst) written += !std::isnan(v);
    CHECK(written == 64);   // nothing outside the 8 x 8 block
  }
}

TEST_CASE("simdgroup_matrix: multiply_accumulate against float64, float/half/bfloat") {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  const size_t lda = 12;
  std::vector<float> a(16 * lda), b(64), c(64);
  for (float& v : a) v = dist(rng);
  for (float& v : b) v = dist(rng);
  for (float& v : c) v = dist(rng);
  for (bool transpose : {false, true}) {
    CAPTURE(transpose);
    const ulong2 origin(2, 3);
    double want[64];
    ReferenceMultiply(a, lda, origin, transpose, b, c, want);
    std::vector<float> out(64, NAN), out_plain(64, NAN), diag(64, NAN);
    MockSimdGroup::Run(kFull, [&](uint32_t) {
      simdgroup_float8x8 ma, mb, mc, md;
      simdgroup_load(ma, a.data(), lda, origin, transpose);
      simdgroup_load(mb, b.data(), 8);
      simdgroup_load(mc, c.data(), 8);
      simdgroup_multiply_accumulate(md, ma, mb, mc);
      simdgroup_store(md, out.data(), 8);
      simdgroup_multiply(md, ma, mb);
      simdgroup_store(md, out_plain.data(), 8);
      simdgroup_float8x8 identity(2.0f);   // diagonal 2: 2 * B
      simdgroup_multiply(md, identity, mb);
      simdgroup_store(md, diag.data(), 8);
    });
    for (int i = 0; i < 64; ++i) {
      CAPTURE(i);
      CHECK(std::fabs(out[i] - want[i]) <= 1e-5);
      CHECK(std::fabs(out_plain[i] - (want[i] - c[i])) <= 1e-5);
      CHECK(diag[i] == 2.0f * b[i]);
    }
  }
  // half and bfloat operands with a float accumulator: products of the rounded inputs.
  std::vector<half> ah(64), bh(64);
  std::vector<bfloat> ab(64), bb(64);
  for (int i = 0; i < 64; ++i) {
    ah[i] = a[i];
    bh[i] = b[i];
    ab[i] = bfloat(a[i]);
    bb[i] = bfloat(b[i]);
  }
  std::vector<float> out_h(64, NAN), out_b(64, NAN);
  std::vector<half> out_hh(64);
  MockSimdGroup::Run(kFull, [&](uint32_t) {
    simdgroup_half8x8 ma, mb, mh;
    simdgroup_load(ma, ah.data());
    simdgroup_load(mb, bh.data());
    simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(1.0f);
    simdgroup_multiply_accumulate(acc, ma, mb, acc);
    simdgroup_store(acc, out_h.data());
    simdgroup_multiply(mh, ma, mb);
    simdgroup_store(mh, out_hh.data());
    simdgroup_bfloat8x8 na, nb;
    simdgroup_load(na, ab.data());
    simdgroup_load(nb, bb.data());
    simdgroup_float8x8 accb = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    simdgroup_multiply_accumulate(accb, na, nb, accb);
    simdgroup_store(accb, out_b.data());
  });
  for (int r = 0; r < 8; ++r)
    for (int col = 0; col < 8; ++col) {
      double wh = 1.0, wb = 0.0;
      for (int k = 0; k < 8; ++k) {
        wh += double(float(ah[r * 8 + k])) * double(float(bh[k * 8 + col]));
        wb += double(float(ab[r * 8 + k])) * double(float(bb[k * 8 + col]));
      }
      CHECK(std::fabs(out_h[r * 8 + col] - wh) <= 1e-5);
      CHECK(std::fabs(out_b[r * 8 + col] - wb) <= 1e-5);
      // A half result is the float result rounded once to half.
      CHECK(std::fabs(float(out_hh[r * 8 + col]) - (wh - 1.0)) <= std::ldexp(std::fabs(wh - 1.0), -10) + 1e-4);
    }
}
