// Component-wise operators on MSL vectors (MSL spec §2.2, §3 "Operators"):
// arithmetic, bitwise and shift operators give a vector of the common type of the
// operands (a scalar operand is converted to the vector's element type and
// replicated, §2.12); comparisons give a bool vector; `!` a bool vector.
#pragma once
#pragma GCC system_header
#include "vec.h"

namespace metal {
namespace detail {

// Applies f component-wise. The result has the common type's width; its element
// type is what f returns for the common element type (bool for comparisons).
template <class F, class... X>
auto zip(F f, const X&... x) {
  using C = common_value_t<X...>;
  if constexpr (!is_vector_like_v<C>) {
    return f(static_cast<C>(x)...);
  } else {
    using E = element_t<C>;
    using R = decltype(f(((void)sizeof(X), std::declval<E>())...));
    vec<std::conditional_t<std::is_same_v<R, bool>, bool, E>, width_v<C>> r;
    for (int i = 0; i < width_v<C>; ++i) r[i] = f(static_cast<E>(component(x, i))...);
    return r;
  }
}

template <class A, class B>
using vector_result_t = typename common_value_if<vector_operands_v<A, B>, A, B>::type;
template <class A, class B>
using vector_mask_t = vec<bool, width_v<vector_result_t<A, B>>>;

}  // namespace detail

#define METAL_VEC_BINARY(op)                                                          \
  template <class A, class B>                                                         \
  detail::vector_result_t<A, B> operator op(const A& a, const B& b) {                 \
    using E = detail::element_t<detail::common_value_t<A, B>>;                        \
    return detail::zip([](E x, E y) -> E { return static_cast<E>(x op y); }, a, b);   \
  }
METAL_VEC_BINARY(+)
METAL_VEC_BINARY(-)
METAL_VEC_BINARY(*)
METAL_VEC_BINARY(/)
METAL_VEC_BINARY(%)
METAL_VEC_BINARY(&)
METAL_VEC_BINARY(|)
METAL_VEC_BINARY(^)
METAL_VEC_BINARY(<<)
METAL_VEC_BINARY(>>)
#undef METAL_VEC_BINARY

#define METAL_VEC_COMPARE(op)                                                         \
  template <class A, class B>                                                         \
  detail::vector_mask_t<A, B> operator op(const A& a, const B& b) {                   \
    using E = detail::element_t<detail::common_value_t<A, B>>;                        \
    return detail::zip([](E x, E y) -> bool { return x op y; }, a, b);                \
  }
METAL_VEC_COMPARE(==)
METAL_VEC_COMPARE(!=)
METAL_VEC_COMPARE(<)
METAL_VEC_COMPARE(>)
METAL_VEC_COMPARE(<=)
METAL_VEC_COMPARE(>=)
METAL_VEC_COMPARE(&&)
METAL_VEC_COMPARE(||)
#undef METAL_VEC_COMPARE

#define METAL_VEC_UNARY(op, result)                                                   \
  template <class X, std::enable_if_t<detail::is_vector_like_v<X>, int> = 0>          \
  auto operator op(const X& x) {                                                      \
    using E = detail::element_t<X>;                                                   \
    return detail::zip([](E v) -> result { return static_cast<result>(op v); }, x);   \
  }
METAL_VEC_UNARY(-, E)
METAL_VEC_UNARY(+, E)
METAL_VEC_UNARY(~, E)
METAL_VEC_UNARY(!, bool)
#undef METAL_VEC_UNARY

}  // namespace metal
