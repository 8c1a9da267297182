// SIMD-group and quad-group functions (MSL spec §6.9.2 "SIMD-group functions",
// §6.9.1 "Quad-group functions"), for scalars and vectors, over the runtime's hook
// table (sim_hooks.h). The SIMD width is 32 (as on every Apple GPU), a quad is the 4 lanes
// 4q..4q+3. Every function must be reached by all active lanes of the group
// (uniform control flow), as on the GPU.
//
// Semantics kept by the simulation:
// * reductions and prefix scans run over the *active* lanes only (lanes that exist
//   and have not returned), in ascending lane order, and every active lane gets the
//   result;
// * simd_shuffle_up/down: a lane whose source would fall outside the group keeps
//   its own value (no wrap); rotate_up/down wrap around the group;
// * a read from an inactive lane is undefined on the GPU: here it yields all-ones
//   bytes (NaN for floats, -1 for signed integers), so a kernel that depends on it
//   fails its test instead of passing by luck.
#pragma once
#pragma GCC system_header
#include <cstring>

#include "math_functions.h"
#include "sim_hooks.h"

namespace metal {
namespace detail {

constexpr uint32_t kSimdWidth = 32;
constexpr uint32_t kQuadWidth = 4;

// Every lane's value of a SIMD-group-uniform exchange, with the caller's lane and
// the active mask.
template <class V>
struct simd_lanes {
  V value[kSimdWidth];
  uint32_t lane;
  uint32_t active;

  bool is_active(uint32_t l) const { return (active >> l) & 1u; }
};

// The active lanes are those that took part in the exchange (sim_hooks.h).
template <class V>
simd_lanes<V> simd_gather(const V& mine) {
  static_assert(sizeof(V) <= 64, "SIMD-group exchange carries at most 64 bytes a lane");
  const metalrt::sim::Hooks& hooks = metalrt::sim::hooks();
  simd_lanes<V> all;
  all.lane = hooks.lane();
  all.active = hooks.simd_exchange(&mine, sizeof(V), all.value);
  if (all.active == ~0u) return all;   // the common case: nothing to poison
  for (uint32_t l = 0; l < kSimdWidth; ++l) {
    if (all.is_active(l)) continue;
    // bool has only two valid values: an inactive lane reads as false.
    std::memset(static_cast<void*>(&all.value[l]),
                std::is_same_v<element_t<V>, bool> ? 0x00 : 0xff, sizeof(V));
  }
  return all;
}

// The group of G lanes (32: the SIMD-group; 4: the caller's quad) as [base, base+G).
template <uint32_t G>
constexpr uint32_t group_base(uint32_t lane) {
  return lane & ~(G - 1u);
}

// Folds f over the active lanes of the caller's group whose index within the group
// is in [0, end), ascending; `empty` when there is none.
template <uint32_t G, class V, class F>
V fold_lanes(const simd_lanes<V>& all, uint32_t end, F f, const V& empty) {
  const uint32_t base = group_base<G>(all.lane);
  bool any = false;
  V acc = empty;
  for (uint32_t i = 0; i < end; ++i) {
    if (!all.is_active(base + i)) continue;
    acc = any ? V(f(acc, all.value[base + i])) : all.value[base + i];
    any = true;
  }
  return acc;
}

template <uint32_t G, class X, class F>
value_t<X> group_reduce(const X& x, F f) {
  using V = value_t<X>;
  return fold_lanes<G>(simd_gather(V(x)), G, f, V(x));
}
template <uint32_t G, class X, class F>
value_t<X> group_prefix(const X& x, F f, bool inclusive, int identity) {
  using V = value_t<X>;
  const simd_lanes<V> all = simd_gather(V(x));
  const uint32_t index = all.lane - group_base<G>(all.lane);
  return fold_lanes<G>(all, index + (inclusive ? 1u : 0u), f, V(identity));
}
// The value of lane `source(all)` of the caller's group (an index within the
// group), or the caller's own value when that index is outside the group (>= G).
template <uint32_t G, class X, class Source>
value_t<X> group_read(const X& x, Source source) {
  using V = value_t<X>;
  const simd_lanes<V> all = simd_gather(V(x));
  const uint32_t index = source(all.lane & (G - 1u), all);
  if (index >= G) return V(x);
  return all.value[group_base<G>(all.lane) + index];
}
// Index within the caller's group of its lowest active lane.
template <uint32_t G, class V>
uint32_t first_active_in_group(const simd_lanes<V>& all) {
  const uint32_t group_mask = G == 32 ? ~0u : (1u << G) - 1u;
  return static_cast<uint32_t>(__builtin_ctz((all.active >> group_base<G>(all.lane)) & group_mask));
}
// Every lane's arrival (and so the final active mask) without data.
inline simd_lanes<uint8_t> simd_sync() { return simd_gather(uint8_t(0)); }

struct plus_op {
  template <class V> V operator()(const V& a, const V& b) const { return V(a + b); }
};
struct times_op {
  template <class V> V operator()(const V& a, const V& b) const { return V(a * b); }
};
struct min_op {
  template <class V> V operator()(const V& a, const V& b) const { return V(metal::min(a, b)); }
};
struct max_op {
  template <class V> V operator()(const V& a, const V& b) const { return V(metal::max(a, b)); }
};
struct and_op {
  template <class V> V operator()(const V& a, const V& b) const { return V(a & b); }
};
struct or_op {
  template <class V> V operator()(const V& a, const V& b) const { return V(a | b); }
};
struct xor_op {
  template <class V> V operator()(const V& a, const V& b) const { return V(a ^ b); }
};

}  // namespace detail

// A SIMD-group vote (MSL §6.9.2): bit l is lane l's predicate. It also keeps the
// lanes that voted, for all().
class simd_vote {
 public:
  using vote_t = uint64_t;
  explicit constexpr simd_vote(vote_t v = 0, vote_t voters = 0xffffffffu) : v_(v), voters_(voters) {}
  explicit constexpr operator vote_t() const { return v_; }
  // True when every lane that voted voted true.
  constexpr bool all() const { return (v_ & voters_) == voters_; }
  constexpr bool any() const { return v_ != 0; }

 private:
  vote_t v_;
  vote_t voters_;
};

// Reductions and scans, for the SIMD-group (simd_*) and the quad (quad_*).
#define METAL_GROUP_REDUCTIONS(group, G)                                                        \
  template <class X> detail::value_t<X> group##_sum(const X& x) { return detail::group_reduce<G>(x, detail::plus_op{}); } \
  template <class X> detail::value_t<X> group##_product(const X& x) { return detail::group_reduce<G>(x, detail::times_op{}); } \
  template <class X> detail::value_t<X> group##_min(const X& x) { return detail::group_reduce<G>(x, detail::min_op{}); } \
  template <class X> detail::value_t<X> group##_max(const X& x) { return detail::group_reduce<G>(x, detail::max_op{}); } \
  template <class X> detail::value_t<X> group##_and(const X& x) { return detail::group_reduce<G>(x, detail::and_op{}); } \
  template <class X> detail::value_t<X> group##_or(const X& x) { return detail::group_reduce<G>(x, detail::or_op{}); } \
  template <class X> detail::value_t<X> group##_xor(const X& x) { return detail::group_reduce<G>(x, detail::xor_op{}); } \
  template <class X> detail::value_t<X> group##_prefix_inclusive_sum(const X& x) {              \
    return detail::group_prefix<G>(x, detail::plus_op{}, true, 0);                              \
  }                                                                                             \
  template <class X> detail::value_t<X> group##_prefix_exclusive_sum(const X& x) {              \
    return detail::group_prefix<G>(x, detail::plus_op{}, false, 0);                             \
  }                                                                                             \
  template <class X> detail::value_t<X> group##_prefix_inclusive_product(const X& x) {          \
    return detail::group_prefix<G>(x, detail::times_op{}, true, 1);                             \
  }                                                                                             \
  template <class X> detail::value_t<X> group##_prefix_exclusive_product(const X& x) {          \
    return detail::group_prefix<G>(x, detail::times_op{}, false, 1);                            \
  }

// Shuffles: `shuffle` reads lane `l` of the group; up/down shift without wrap;
// rotate_up/down shift with wrap; xor reads lane (own ^ mask); broadcast is shuffle
// with a group-uniform lane; broadcast_first reads the lowest active lane.
#define METAL_GROUP_SHUFFLES(group, G)                                                          \
  template <class X> detail::value_t<X> group##_shuffle(const X& x, uint l) {                  \
    return detail::group_read<G>(x, [l](uint32_t, const auto&) { return l % G; });             \
  }                                                                                             \
  template <class X> detail::value_t<X> group##_broadcast(const X& x, uint l) {                \
    return detail::group_read<G>(x, [l](uint32_t, const auto&) { return l % G; });             \
  }                                                                                             \
  template <class X> detail::value_t<X> group##_shuffle_up(const X& x, uint delta) {           \
    return detail::group_read<G>(                                                               \
        x, [delta](uint32_t i, const auto&) { return delta > i ? G : i - delta; });             \
  }                                                                                             \
  template <class X> detail::value_t<X> group##_shuffle_down(const X& x, uint delta) {         \
    return detail::group_read<G>(                                                               \
        x, [delta](uint32_t i, const auto&) { return delta >= G - i ? G : i + delta; });        \
  }                                                                                             \
  template <class X> detail::value_t<X> group##_shuffle_rotate_up(const X& x, uint delta) {    \
    return detail::group_read<G>(                                                               \
        x, [delta](uint32_t i, const auto&) { return (i + G - delta % G) % G; });               \
  }                                                                                             \
  template <class X> detail::value_t<X> group##_shuffle_rotate_down(const X& x, uint delta) {  \
    return detail::group_read<G>(x, [delta](uint32_t i, const auto&) { return (i + delta) % G; }); \
  }                                                                                             \
  template <class X> detail::value_t<X> group##_shuffle_xor(const X& x, uint mask) {           \
    return detail::group_read<G>(x, [mask](uint32_t i, const auto&) { return i ^ (mask % G); }); \
  }                                                                                             \
  template <class X> detail::value_t<X> group##_broadcast_first(const X& x) {                  \
    return detail::group_read<G>(                                                               \
        x, [](uint32_t, const auto& all) { return detail::first_active_in_group<G>(all); });   \
  }                                                                                             \
  inline bool group##_is_first() {                                                              \
    const auto all = detail::simd_sync();                                                       \
    return (all.lane & (G - 1u)) == detail::first_active_in_group<G>(all);                      \
  }                                                                                             \
  inline bool group##_all(bool b) { return group##_and(uint(b)) != 0; }                        \
  inline bool group##_any(bool b) { return group##_or(uint(b)) != 0; }

METAL_GROUP_REDUCTIONS(simd, detail::kSimdWidth)
METAL_GROUP_SHUFFLES(simd, detail::kSimdWidth)
METAL_GROUP_REDUCTIONS(quad, detail::kQuadWidth)
METAL_GROUP_SHUFFLES(quad, detail::kQuadWidth)
#undef METAL_GROUP_REDUCTIONS
#undef METAL_GROUP_SHUFFLES

// simd_ballot(p): bit l set when active lane l passed true.
inline simd_vote simd_ballot(bool predicate) {
  const detail::simd_lanes<uint8_t> all = detail::simd_gather(uint8_t(predicate));
  simd_vote::vote_t votes = 0;
  for (uint32_t l = 0; l < detail::kSimdWidth; ++l)
    if (all.is_active(l) && all.value[l]) votes |= simd_vote::vote_t(1) << l;
  return simd_vote(votes, all.active);
}
inline simd_vote simd_active_threads_mask() {
  const uint32_t active = detail::simd_sync().active;
  return simd_vote(active, active);
}
// Compute kernels have no helper threads (those exist in fragment functions).
inline bool simd_is_helper_thread() { return false; }

}  // namespace metal
