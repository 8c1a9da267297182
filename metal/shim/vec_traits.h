// What the generic vector code needs to know about a type: MSL scalars (every
// arithmetic type plus half/bfloat) and the vector-like types — `vec<T, N>` (MSL
// spec §2.2 "Vector data types"), a swizzle of one (§2.2.1 "Accessing vector
// components") and the packed vectors (§2.2.3 "Packed vector types") — with their
// element type, component count and the plain vector they stand for.
#pragma once
#pragma GCC system_header
#include <type_traits>

#include "soft_float.h"

namespace metal {

template <class T, int N>
struct vec;
template <class T, int N>
struct packed_vec;
namespace detail {
template <class T, int S, int... I>
struct swizzle;
}

namespace detail {

template <class T>
inline constexpr bool is_scalar_like_v = is_msl_arithmetic_v<T>;

template <class X>
struct vector_info {
  static constexpr bool is_vector = false;
  static constexpr int width = 1;
  using element = X;
  using value = X;   // what a scalar reads as: itself
};
template <class T, int N>
struct vector_info<vec<T, N>> {
  static constexpr bool is_vector = true;
  static constexpr int width = N;
  using element = T;
  using value = vec<T, N>;
};
template <class T, int N>
struct vector_info<packed_vec<T, N>> : vector_info<vec<T, N>> {};
template <class T, int S, int... I>
struct vector_info<swizzle<T, S, I...>> : vector_info<vec<T, static_cast<int>(sizeof...(I))>> {};

template <class X>
inline constexpr bool is_vector_like_v = vector_info<std::remove_cv_t<X>>::is_vector;
template <class X>
inline constexpr int width_v = vector_info<std::remove_cv_t<X>>::width;
template <class X>
using element_t = typename vector_info<std::remove_cv_t<X>>::element;
// The plain value an expression of type X stands for (a swizzle reads as a vec).
template <class X>
using value_t = typename vector_info<std::remove_cv_t<X>>::value;

template <class T>
struct type_identity {
  using type = T;
};
template <class T>
using type_identity_t = typename type_identity<T>::type;

// Component i of a vector-like value, or the scalar itself (broadcast).
template <class T, int S, int... I>
constexpr const T& component(const swizzle<T, S, I...>& s, int i) {
  constexpr int index[] = {I...};
  return s.d_[index[i]];
}
template <class X>
constexpr decltype(auto) component(const X& x, int i) {
  if constexpr (is_vector_like_v<X>) {
    return x[i];
  } else {
    (void)i;
    return x;
  }
}

// The common type of operands mixed in one component-wise operation (MSL §2.12):
// a scalar meets a vector -> the vector type (the scalar is converted to its
// element type and replicated); two vectors must be the same vector type; two
// scalars -> the usual arithmetic conversions (with half/bfloat per soft_float.h).
template <class A, class B, bool AnyVector>
struct pair_common {   // two scalars: the usual arithmetic conversions
  using type = decltype(std::declval<A>() + std::declval<B>());
};
template <class A, class B>
struct pair_common<A, B, true> {
  using type = std::conditional_t<is_vector_like_v<A>, value_t<A>, value_t<B>>;
};

template <class... X>
struct common_value;
template <class A>
struct common_value<A> {
  using type = value_t<A>;
};
template <class A, class B, class... R>
struct common_value<A, B, R...> {
  using VA = value_t<A>;
  using VB = value_t<B>;
  static_assert(!is_vector_like_v<A> || !is_vector_like_v<B> || std::is_same_v<VA, VB>,
                "MSL: mixing different vector types needs an explicit conversion");
  using head = typename pair_common<VA, VB, is_vector_like_v<A> || is_vector_like_v<B>>::type;
  using type = typename common_value<head, R...>::type;
};
template <class... X>
using common_value_t = typename common_value<X...>::type;

// True when every operand is a scalar or a vector-like value.
template <class... X>
inline constexpr bool component_sources_v = ((is_vector_like_v<X> || is_scalar_like_v<X>) && ...);

// common_value_t<X...> only when Enable; no type otherwise, without computing it
// (so that unrelated types meeting a generic metal:: operator fail softly).
template <bool Enable, class... X>
struct common_value_if {};
template <class... X>
struct common_value_if<true, X...> {
  using type = common_value_t<X...>;
};

// True when the operands can meet in a component-wise operation with at least one
// vector among them (used to enable the vector operators only).
template <class A, class B>
inline constexpr bool vector_operands_v =
    (is_vector_like_v<A> || is_vector_like_v<B>) &&
    (is_vector_like_v<A> || is_scalar_like_v<A>) && (is_vector_like_v<B> || is_scalar_like_v<B>) &&
    (!is_vector_like_v<A> || !is_vector_like_v<B> || std::is_same_v<value_t<A>, value_t<B>>);

}  // namespace detail
}  // namespace metal
