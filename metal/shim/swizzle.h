// Swizzles of MSL vectors (MSL spec §2.2.1 "Accessing vector components"):
// `v.xy`, `v.zyx`, `v.rgba`, ... of 2 to 4 components from the set {x,y,z,w} or
// {r,g,b,a}, readable always and writable when no component repeats (`v.xy = u`;
// `v.xx = u` does not compile). Single components (`v.x`, `v.r`) are plain scalar
// members of the vector (vec.h), so they bind to `T&` and deduce as `T`.
//
// A swizzle is a member of the vector's storage union with the same layout as the
// storage (`T d_[S]`); it reads and writes the components I... of that storage.
#pragma once
#pragma GCC system_header
#include "vec_traits.h"

namespace metal {
namespace detail {

template <int... I>
constexpr bool distinct_components() {
  constexpr int idx[] = {I...};
  for (int a = 0; a < static_cast<int>(sizeof...(I)); ++a)
    for (int b = a + 1; b < static_cast<int>(sizeof...(I)); ++b)
      if (idx[a] == idx[b]) return false;
  return true;
}

// The storage of a swizzle, and what assigning a swizzle of the same pattern copies
// (`a.zw = b.zw`): only the named components, except where copying the whole storage
// is the same thing — the pattern names every stored component (`v2.yx`) or repeats
// one (never assignable, below) — where the copy stays trivial. Every swizzle of a
// 2-component vector is of that kind, so vectors of two components are trivially
// copyable and can live in unions as in Metal (ggml's block_q4_1:
// `union { struct { half d, m; }; half2 dm; }` is copied as a whole).
template <class T, int S>
struct swizzle_storage {
  T d_[S];
};
template <class T, int S, int... I>
struct swizzle_subset : swizzle_storage<T, S> {
  swizzle_subset& operator=(const swizzle_subset& o) {
    ((this->d_[I] = o.d_[I]), ...);
    return *this;
  }
};
template <class T, int S, int... I>
using swizzle_base = std::conditional_t<!distinct_components<I...>() || sizeof...(I) == S,
                                        swizzle_storage<T, S>, swizzle_subset<T, S, I...>>;

// Kept to the storage and one assignment: a 4-vector has 680 swizzle members, and
// every member function here costs compile time in every kernel. Reading goes
// through vec's converting constructor; `op=` is below.
template <class T, int S, int... I>
struct swizzle : swizzle_base<T, S, I...> {
  // From the vector type of this swizzle, or what converts to it implicitly (a
  // scalar, a swizzle of the same element type). A forwarding reference, so that it
  // (not the copy assignment) takes a non-const swizzle of the same pattern too, and
  // `a.xx = b.xx` is refused; only from a const one (`a.xx = cb.xx`) the trivial copy
  // of swizzle_base is chosen, which C++ cannot tell apart from a union's copy.
  template <class X>
  swizzle& operator=(X&& x) {
    static_assert(distinct_components<I...>(),
                  "MSL: a swizzle that repeats a component cannot be assigned to");
    const vec<T, sizeof...(I)> v = x;
    int i = 0;
    ((this->d_[I] = v[i++]), ...);
    return *this;
  }
};

#define METAL_SWIZZLE_COMPOUND(op)                                                  \
  template <class T, int S, int... I, class B>                                      \
  swizzle<T, S, I...>& operator op##=(swizzle<T, S, I...>& s, const B& b) {         \
    return s = vec<T, sizeof...(I)>(s) op b;                                        \
  }
METAL_SWIZZLE_COMPOUND(+)
METAL_SWIZZLE_COMPOUND(-)
METAL_SWIZZLE_COMPOUND(*)
METAL_SWIZZLE_COMPOUND(/)
METAL_SWIZZLE_COMPOUND(%)
METAL_SWIZZLE_COMPOUND(&)
METAL_SWIZZLE_COMPOUND(|)
METAL_SWIZZLE_COMPOUND(^)
METAL_SWIZZLE_COMPOUND(<<)
METAL_SWIZZLE_COMPOUND(>>)
#undef METAL_SWIZZLE_COMPOUND

}  // namespace detail
}  // namespace metal

// Member declarations of every swizzle of length 2..4 over a component-letter set.
// A set is named by its letters and size (xyzw2 = {x, y}, rgba3 = {r, g, b}, ...).
// The preprocessor cannot nest a macro inside itself, so each nesting level has its
// own copy of the letter lists (levels 1 to 4).
#define METAL_SET_1_xyzw2(F, ...) F(__VA_ARGS__, x, 0) F(__VA_ARGS__, y, 1)
#define METAL_SET_2_xyzw2(F, ...) F(__VA_ARGS__, x, 0) F(__VA_ARGS__, y, 1)
#define METAL_SET_3_xyzw2(F, ...) F(__VA_ARGS__, x, 0) F(__VA_ARGS__, y, 1)
#define METAL_SET_4_xyzw2(F, ...) F(__VA_ARGS__, x, 0) F(__VA_ARGS__, y, 1)
#define METAL_SET_1_xyzw3(F, ...) METAL_SET_1_xyzw2(F, __VA_ARGS__) F(__VA_ARGS__, z, 2)
#define METAL_SET_2_xyzw3(F, ...) METAL_SET_2_xyzw2(F, __VA_ARGS__) F(__VA_ARGS__, z, 2)
#define METAL_SET_3_xyzw3(F, ...) METAL_SET_3_xyzw2(F, __VA_ARGS__) F(__VA_ARGS__, z, 2)
#define METAL_SET_4_xyzw3(F, ...) METAL_SET_4_xyzw2(F, __VA_ARGS__) F(__VA_ARGS__, z, 2)
#define METAL_SET_1_xyzw4(F, ...) METAL_SET_1_xyzw3(F, __VA_ARGS__) F(__VA_ARGS__, w, 3)
#define METAL_SET_2_xyzw4(F, ...) METAL_SET_2_xyzw3(F, __VA_ARGS__) F(__VA_ARGS__, w, 3)
#define METAL_SET_3_xyzw4(F, ...) METAL_SET_3_xyzw3(F, __VA_ARGS__) F(__VA_ARGS__, w, 3)
#define METAL_SET_4_xyzw4(F, ...) METAL_SET_4_xyzw3(F, __VA_ARGS__) F(__VA_ARGS__, w, 3)
#define METAL_SET_1_rgba2(F, ...) F(__VA_ARGS__, r, 0) F(__VA_ARGS__, g, 1)
#define METAL_SET_2_rgba2(F, ...) F(__VA_ARGS__, r, 0) F(__VA_ARGS__, g, 1)
#define METAL_SET_3_rgba2(F, ...) F(__VA_ARGS__, r, 0) F(__VA_ARGS__, g, 1)
#define METAL_SET_4_rgba2(F, ...) F(__VA_ARGS__, r, 0) F(__VA_ARGS__, g, 1)
#define METAL_SET_1_rgba3(F, ...) METAL_SET_1_rgba2(F, __VA_ARGS__) F(__VA_ARGS__, b, 2)
#define METAL_SET_2_rgba3(F, ...) METAL_SET_2_rgba2(F, __VA_ARGS__) F(__VA_ARGS__, b, 2)
#define METAL_SET_3_rgba3(F, ...) METAL_SET_3_rgba2(F, __VA_ARGS__) F(__VA_ARGS__, b, 2)
#define METAL_SET_4_rgba3(F, ...) METAL_SET_4_rgba2(F, __VA_ARGS__) F(__VA_ARGS__, b, 2)
#define METAL_SET_1_rgba4(F, ...) METAL_SET_1_rgba3(F, __VA_ARGS__) F(__VA_ARGS__, a, 3)
#define METAL_SET_2_rgba4(F, ...) METAL_SET_2_rgba3(F, __VA_ARGS__) F(__VA_ARGS__, a, 3)
#define METAL_SET_3_rgba4(F, ...) METAL_SET_3_rgba3(F, __VA_ARGS__) F(__VA_ARGS__, a, 3)
#define METAL_SET_4_rgba4(F, ...) METAL_SET_4_rgba3(F, __VA_ARGS__) F(__VA_ARGS__, a, 3)

#define METAL_SWZ2_B(T, S, a, ia, b, ib) ::metal::detail::swizzle<T, S, ia, ib> a##b;
#define METAL_SWZ2_A(T, S, SET, a, ia) METAL_SET_2_##SET(METAL_SWZ2_B, T, S, a, ia)
#define METAL_SWZ3_C(T, S, a, ia, b, ib, c, ic) ::metal::detail::swizzle<T, S, ia, ib, ic> a##b##c;
#define METAL_SWZ3_B(T, S, SET, a, ia, b, ib) METAL_SET_3_##SET(METAL_SWZ3_C, T, S, a, ia, b, ib)
#define METAL_SWZ3_A(T, S, SET, a, ia) METAL_SET_2_##SET(METAL_SWZ3_B, T, S, SET, a, ia)
#define METAL_SWZ4_D(T, S, a, ia, b, ib, c, ic, d, id) \
  ::metal::detail::swizzle<T, S, ia, ib, ic, id> a##b##c##d;
#define METAL_SWZ4_C(T, S, SET, a, ia, b, ib, c, ic) \
  METAL_SET_4_##SET(METAL_SWZ4_D, T, S, a, ia, b, ib, c, ic)
#define METAL_SWZ4_B(T, S, SET, a, ia, b, ib) METAL_SET_3_##SET(METAL_SWZ4_C, T, S, SET, a, ia, b, ib)
#define METAL_SWZ4_A(T, S, SET, a, ia) METAL_SET_2_##SET(METAL_SWZ4_B, T, S, SET, a, ia)

// All swizzles of lengths 2, 3 and 4 over SET, as union members over `T d_[S]`.
#define METAL_SWIZZLES(T, S, SET)                 \
  METAL_SET_1_##SET(METAL_SWZ2_A, T, S, SET)      \
  METAL_SET_1_##SET(METAL_SWZ3_A, T, S, SET)      \
  METAL_SET_1_##SET(METAL_SWZ4_A, T, S, SET)
