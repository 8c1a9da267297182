// MSL integer functions (MSL spec §6.3 "Integer functions"), component-wise on
// integer scalars and vectors: popcount, clz, ctz (clz(0) = ctz(0) = the bit width),
// mulhi (the high half of the full product).
#pragma once
#pragma GCC system_header
#include <climits>

#include "vec_types.h"

namespace metal {
namespace detail {

template <class X>
using integer_result_t =
    std::enable_if_t<std::is_integral_v<element_t<X>> && !std::is_same_v<element_t<X>, bool>,
                     value_t<X>>;

template <class E>
constexpr auto as_unsigned(E v) {
  return static_cast<std::make_unsigned_t<E>>(v);
}
template <class E>
constexpr int bit_width_of() {
  return static_cast<int>(sizeof(E) * CHAR_BIT);
}

}  // namespace detail

template <class X>
detail::integer_result_t<X> popcount(const X& x) {
  using E = detail::element_t<X>;
  return detail::zip([](E v) -> E { return static_cast<E>(__builtin_popcountll(detail::as_unsigned(v))); }, x);
}
template <class X>
detail::integer_result_t<X> clz(const X& x) {
  using E = detail::element_t<X>;
  return detail::zip(
      [](E v) -> E {
        const unsigned long long u = detail::as_unsigned(v);
        if (u == 0) return static_cast<E>(detail::bit_width_of<E>());
        return static_cast<E>(__builtin_clzll(u) - (64 - detail::bit_width_of<E>()));
      },
      x);
}
template <class X>
detail::integer_result_t<X> ctz(const X& x) {
  using E = detail::element_t<X>;
  return detail::zip(
      [](E v) -> E {
        const unsigned long long u = detail::as_unsigned(v);
        if (u == 0) return static_cast<E>(detail::bit_width_of<E>());
        return static_cast<E>(__builtin_ctzll(u));
      },
      x);
}
template <class X, class Y>
detail::integer_result_t<detail::common_value_t<X, Y>> mulhi(const X& x, const Y& y) {
  using E = detail::element_t<detail::common_value_t<X, Y>>;
  return detail::zip(
      [](E a, E b) -> E {
        if constexpr (sizeof(E) == 8) {
          using W = std::conditional_t<std::is_signed_v<E>, __int128, unsigned __int128>;
          return static_cast<E>((static_cast<W>(a) * static_cast<W>(b)) >> 64);
        } else {
          using W = std::conditional_t<std::is_signed_v<E>, long long, unsigned long long>;
          return static_cast<E>((static_cast<W>(a) * static_cast<W>(b)) >> detail::bit_width_of<E>());
        }
      },
      x, y);
}

}  // namespace metal
