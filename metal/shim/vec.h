// MSL vector types `vec<T, N>` (MSL spec §2.2 "Vector data types"): N = 2, 3, 4
// components, laid out like the GPU's (§2.2 Table 2.3: a 3-component vector
// occupies and is aligned to 4 components, e.g. float3 is 16 bytes; half4 is 8).
// Components: `v[i]`, `v.x`..`v.w` / `v.r`..`v.a` (scalar members) and every swizzle
// (swizzle.h). Construction (§2.2.2 "Vector constructors"): from one scalar
// (replicated; implicit, so `float4 v = 0;` works), from scalars and smaller
// vectors whose components add up to N (`float4(v.xy, 0, 1)`), implicitly from a
// swizzle of the same element type, and explicitly from a vector of another
// element type (`float4(h4)`).
//
// The packed vectors (§2.2.3: `packed_float3` is 12 bytes, aligned as float) share
// the storage template with S = N components and the alignment of T.
#pragma once
#pragma GCC system_header
#include "swizzle.h"

namespace metal {
namespace detail {

template <class T, int N, int S, int Align>
struct vec_storage;

template <class T, int S, int Align>
struct alignas(Align) vec_storage<T, 2, S, Align> {
  union {
    T d_[S];
    struct { T x, y; };
    struct { T r, g; };
    METAL_SWIZZLES(T, S, xyzw2)
    METAL_SWIZZLES(T, S, rgba2)
  };
};
template <class T, int S, int Align>
struct alignas(Align) vec_storage<T, 3, S, Align> {
  // The union's own copy is deleted: some of its swizzles copy only their components.
  vec_storage& operator=(const vec_storage& o) {
    for (int i = 0; i < S; ++i) d_[i] = o.d_[i];
    return *this;
  }
  union {
    T d_[S];
    struct { T x, y, z; };
    struct { T r, g, b; };
    METAL_SWIZZLES(T, S, xyzw3)
    METAL_SWIZZLES(T, S, rgba3)
  };
};
template <class T, int S, int Align>
struct alignas(Align) vec_storage<T, 4, S, Align> {
  // The union's own copy is deleted: some of its swizzles copy only their components.
  vec_storage& operator=(const vec_storage& o) {
    for (int i = 0; i < S; ++i) d_[i] = o.d_[i];
    return *this;
  }
  union {
    T d_[S];
    struct { T x, y, z, w; };
    struct { T r, g, b, a; };
    METAL_SWIZZLES(T, S, xyzw4)
    METAL_SWIZZLES(T, S, rgba4)
  };
};

// Storage and element access shared by vec and packed_vec (S stored components).
template <class T, int N, int S, int Align>
struct vector_base : vec_storage<T, N, S, Align> {
  constexpr const T& operator[](int i) const { return this->d_[i]; }
  T& operator[](int i) { return this->d_[i]; }

 protected:
  template <class X>
  void put(int& k, const X& x) {
    for (int i = 0; i < width_v<X>; ++i) this->d_[k++] = static_cast<T>(component(x, i));
  }
  template <class... A>
  void assign(const A&... a) {
    int k = 0;
    (put(k, a), ...);
  }
};

template <class X>
inline constexpr bool is_component_source_v = is_vector_like_v<X> || is_scalar_like_v<X>;

}  // namespace detail

#define METAL_VECTOR_CONSTRUCTORS(V)                                                    \
  V() = default;                                                                        \
  V(const V&) = default;                                                                \
  V& operator=(const V&) = default;                                                     \
  template <class S_, std::enable_if_t<detail::is_scalar_like_v<S_>, int> = 0>          \
  V(const S_& s) {                                                                      \
    for (int i = 0; i < N; ++i) this->d_[i] = static_cast<T>(s);                        \
  }                                                                                     \
  template <class... A,                                                                 \
            std::enable_if_t<(sizeof...(A) >= 2) && ((detail::width_v<A> + ...) == N) && \
                                 (detail::is_component_source_v<A> && ...),             \
                             int> = 0>                                                  \
  V(const A&... a) {                                                                    \
    this->assign(a...);                                                                 \
  }                                                                                     \
  template <int S_, int... I, std::enable_if_t<sizeof...(I) == N, int> = 0>              \
  V(const detail::swizzle<T, S_, I...>& s) {                                            \
    this->assign(s);                                                                    \
  }                                                                                     \
  template <class X, std::enable_if_t<detail::is_vector_like_v<X> && detail::width_v<X> == N, \
                                      int> = 0>                                         \
  explicit V(const X& x) {                                                              \
    this->assign(x);                                                                    \
  }

template <class T, int N>
struct vec : detail::vector_base<T, N, N == 3 ? 4 : N, sizeof(T) * (N == 3 ? 4 : N)> {
  static_assert(N >= 2 && N <= 4, "MSL vectors have 2, 3 or 4 components");
  METAL_VECTOR_CONSTRUCTORS(vec)

#define METAL_VEC_COMPOUND(op)                \
  template <class B>                          \
  vec& operator op##=(const B& b) {           \
    return *this = *this op b;                \
  }
  METAL_VEC_COMPOUND(+)
  METAL_VEC_COMPOUND(-)
  METAL_VEC_COMPOUND(*)
  METAL_VEC_COMPOUND(/)
  METAL_VEC_COMPOUND(%)
  METAL_VEC_COMPOUND(&)
  METAL_VEC_COMPOUND(|)
  METAL_VEC_COMPOUND(^)
  METAL_VEC_COMPOUND(<<)
  METAL_VEC_COMPOUND(>>)
#undef METAL_VEC_COMPOUND
  vec& operator++() { return *this += T(1); }
  vec& operator--() { return *this -= T(1); }
  vec operator++(int) { vec old = *this; ++*this; return old; }
  vec operator--(int) { vec old = *this; --*this; return old; }
};

// Packed vectors convert implicitly to and from the aligned vector of the same
// type (§2.2.3); arithmetic on them reads them as that vector.
template <class T, int N>
struct packed_vec : detail::vector_base<T, N, N, alignof(T)> {
  static_assert(N >= 2 && N <= 4, "MSL vectors have 2, 3 or 4 components");
  METAL_VECTOR_CONSTRUCTORS(packed_vec)
  packed_vec(const vec<T, N>& v) { this->assign(v); }
  operator vec<T, N>() const { return vec<T, N>(*this); }
};

#undef METAL_VECTOR_CONSTRUCTORS

}  // namespace metal
