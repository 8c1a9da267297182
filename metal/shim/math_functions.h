// metal:: math functions (MSL spec §6.5 "Math functions", §6.2 "Common functions",
// §6.4 "Relational functions", §6.6 "Geometric functions"), component-wise on
// scalars and vectors of half, bfloat and float (and integers where MSL has them).
//
// Three flavours as in MSL §6.5: `metal::precise::f` is correctly rounded (computed
// in double, rounded once to float); plain `metal::f` uses the host's float libm (our
// metallib is built with -fno-fast-math, so plain functions are the accurate-in-ulps
// default); `metal::fast::f` is the plain function too, except sin/cos/tan/sincos,
// which reduce their argument in float the way a GPU's fast path does, so the error
// grows with |x| as on a Mac (about 1e-2 near 131072) and a kernel that needs
// accurate angles fails here too. half and bfloat arguments are computed in float and
// rounded once to their type.
#pragma once
#pragma GCC system_header
#include <cmath>

#include "vec_types.h"

namespace metal {
namespace detail {

template <class X>
inline constexpr bool is_float_element_v =
    std::is_floating_point_v<element_t<X>> || is_float16_v<element_t<X>>;

// Float functions: enabled when every argument is a float scalar/vector (or an
// arithmetic scalar mixed with one); the result has the common type.
template <class C>
using float_only_t = std::enable_if_t<is_float_element_v<C>, C>;
template <class... X>
using float_result_t = float_only_t<typename common_value_if<component_sources_v<X...>, X...>::type>;

// Computes f on float copies of the components and rounds to the element type.
template <class... X, class F>
float_result_t<X...> map_float(F f, const X&... x) {
  using E = element_t<common_value_t<X...>>;
  return zip([f](auto... c) -> E { return static_cast<E>(f(static_cast<float>(c)...)); }, x...);
}

}  // namespace detail

// Unary float functions in their plain and precise flavours; METAL_FLOAT_FN1 adds
// fast:: as the plain one, METAL_FLOAT_FN1_OWN_FAST leaves fast:: to be written below.
#define METAL_FLOAT_FN1_OWN_FAST(name, plain, precise_expr)                          \
  template <class X>                                                                 \
  detail::float_result_t<X> name(const X& x) {                                       \
    return detail::map_float([](float v) -> float { return plain; }, x);             \
  }                                                                                  \
  namespace precise {                                                                \
  template <class X>                                                                 \
  detail::float_result_t<X> name(const X& x) {                                       \
    return detail::map_float(                                                        \
        [](float v) -> float { const double d = v; return static_cast<float>(precise_expr); }, x); \
  }                                                                                  \
  }
#define METAL_FLOAT_FN1(name, plain, precise_expr)                                   \
  METAL_FLOAT_FN1_OWN_FAST(name, plain, precise_expr)                                \
  namespace fast {                                                                   \
  using metal::name;                                                                 \
  }

METAL_FLOAT_FN1(sqrt, std::sqrt(v), std::sqrt(d))
METAL_FLOAT_FN1(rsqrt, 1.0f / std::sqrt(v), 1.0 / std::sqrt(d))
METAL_FLOAT_FN1(exp, std::exp(v), std::exp(d))
METAL_FLOAT_FN1(exp2, std::exp2(v), std::exp2(d))
METAL_FLOAT_FN1(exp10, std::pow(10.0f, v), std::pow(10.0, d))
METAL_FLOAT_FN1(log, std::log(v), std::log(d))
METAL_FLOAT_FN1(log2, std::log2(v), std::log2(d))
METAL_FLOAT_FN1(log10, std::log10(v), std::log10(d))
METAL_FLOAT_FN1_OWN_FAST(sin, std::sin(v), std::sin(d))
METAL_FLOAT_FN1_OWN_FAST(cos, std::cos(v), std::cos(d))
METAL_FLOAT_FN1_OWN_FAST(tan, std::tan(v), std::tan(d))
METAL_FLOAT_FN1(asin, std::asin(v), std::asin(d))
METAL_FLOAT_FN1(acos, std::acos(v), std::acos(d))
METAL_FLOAT_FN1(atan, std::atan(v), std::atan(d))
METAL_FLOAT_FN1(sinh, std::sinh(v), std::sinh(d))
METAL_FLOAT_FN1(cosh, std::cosh(v), std::cosh(d))
METAL_FLOAT_FN1(tanh, std::tanh(v), std::tanh(d))
METAL_FLOAT_FN1(sinpi, std::sin(v * 3.14159265358979323846f), std::sin(d * 3.14159265358979323846))
METAL_FLOAT_FN1(cospi, std::cos(v * 3.14159265358979323846f), std::cos(d * 3.14159265358979323846))
METAL_FLOAT_FN1(fabs, std::fabs(v), std::fabs(d))
METAL_FLOAT_FN1(floor, std::floor(v), std::floor(d))
METAL_FLOAT_FN1(ceil, std::ceil(v), std::ceil(d))
METAL_FLOAT_FN1(round, std::round(v), std::round(d))   // halfway cases away from zero
METAL_FLOAT_FN1(rint, std::nearbyint(v), std::nearbyint(d))   // halfway cases to even
METAL_FLOAT_FN1(trunc, std::trunc(v), std::trunc(d))
// fract(x) = x - floor(x), clamped below 1 (MSL §6.5: fmin(x - floor(x), 0x1.fffffep-1f)).
METAL_FLOAT_FN1(fract, std::fmin(v - std::floor(v), 0x1.fffffep-1f),
                std::fmin(d - std::floor(d), 0x1.fffffep-1))
METAL_FLOAT_FN1(saturate, std::fmin(std::fmax(v, 0.0f), 1.0f), std::fmin(std::fmax(d, 0.0), 1.0))
#undef METAL_FLOAT_FN1
#undef METAL_FLOAT_FN1_OWN_FAST

namespace detail {
// The argument reduction of a fast-math trig path: v - k * 2pi with 2pi, the product
// and the difference each rounded to float (separate statements, so no FMA fuses
// them). Its error is about |k| * 1.7e-7 (2pi's float rounding) plus half an ulp of
// |v|: nothing in [-pi, pi], ~1e-2 near 131072, which is the drift RoPE angles show
// at long positions on a GPU with fast math.
inline float fast_reduce_angle(float v) {
  constexpr float two_pi = 6.28318530717958647692f;
  constexpr float inv_two_pi = 0.15915494309189533577f;
  const float k = std::nearbyint(v * inv_two_pi);
  const float multiple = k * two_pi;
  return v - multiple;
}
}  // namespace detail

namespace fast {
#define METAL_FAST_TRIG(name)                                                                    \
  template <class X>                                                                             \
  detail::float_result_t<X> name(const X& x) {                                                   \
    return detail::map_float([](float v) { return std::name(detail::fast_reduce_angle(v)); }, x); \
  }
METAL_FAST_TRIG(sin)
METAL_FAST_TRIG(cos)
METAL_FAST_TRIG(tan)
#undef METAL_FAST_TRIG
}  // namespace fast

// Binary float functions (same flavours).
#define METAL_FLOAT_FN2(name, plain, precise_expr)                                    \
  template <class X, class Y>                                                         \
  detail::float_result_t<X, Y> name(const X& x, const Y& y) {                         \
    return detail::map_float([](float a, float b) -> float { return plain; }, x, y);  \
  }                                                                                   \
  namespace precise {                                                                 \
  template <class X, class Y>                                                         \
  detail::float_result_t<X, Y> name(const X& x, const Y& y) {                         \
    return detail::map_float([](float a, float b) -> float {                          \
      const double da = a, db = b; return static_cast<float>(precise_expr); }, x, y); \
  }                                                                                   \
  }                                                                                   \
  namespace fast {                                                                    \
  using metal::name;                                                                  \
  }

METAL_FLOAT_FN2(pow, std::pow(a, b), std::pow(da, db))
METAL_FLOAT_FN2(powr, std::pow(a, b), std::pow(da, db))   // MSL: x >= 0 only
METAL_FLOAT_FN2(fmod, std::fmod(a, b), std::fmod(da, db))
METAL_FLOAT_FN2(atan2, std::atan2(a, b), std::atan2(da, db))
METAL_FLOAT_FN2(fmin, std::fmin(a, b), std::fmin(da, db))   // a NaN operand yields the other
METAL_FLOAT_FN2(fmax, std::fmax(a, b), std::fmax(da, db))
METAL_FLOAT_FN2(copysign, std::copysign(a, b), std::copysign(da, db))
METAL_FLOAT_FN2(fdim, std::fdim(a, b), std::fdim(da, db))
METAL_FLOAT_FN2(divide, a / b, da / db)
#undef METAL_FLOAT_FN2

// fma(a, b, c) = a * b + c rounded once.
template <class X, class Y, class Z>
detail::float_result_t<X, Y, Z> fma(const X& a, const Y& b, const Z& c) {
  return detail::map_float([](float p, float q, float r) { return std::fma(p, q, r); }, a, b, c);
}
// mix(x, y, a) = x + (y - x) * a (MSL §6.2).
template <class X, class Y, class A>
detail::float_result_t<X, Y, A> mix(const X& x, const Y& y, const A& a) {
  return detail::map_float([](float p, float q, float t) { return p + (q - p) * t; }, x, y, a);
}
// step(edge, x) = x < edge ? 0 : 1.
template <class E, class X>
detail::float_result_t<E, X> step(const E& edge, const X& x) {
  return detail::map_float([](float e, float v) { return v < e ? 0.0f : 1.0f; }, edge, x);
}
// smoothstep(e0, e1, x): t = clamp((x - e0) / (e1 - e0), 0, 1); t * t * (3 - 2 t).
template <class E0, class E1, class X>
detail::float_result_t<E0, E1, X> smoothstep(const E0& e0, const E1& e1, const X& x) {
  return detail::map_float(
      [](float a, float b, float v) {
        const float t = std::fmin(std::fmax((v - a) / (b - a), 0.0f), 1.0f);
        return t * t * (3.0f - 2.0f * t);
      },
      e0, e1, x);
}
// sign(x): 1, -1, +-0 for +-0, 0 for NaN (MSL §6.2).
template <class X>
detail::float_result_t<X> sign(const X& x) {
  return detail::map_float(
      [](float v) { return v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : v == 0.0f ? v : 0.0f; }, x);
}
// sincos(x, cosval): returns sin(x) and stores cos(x).
template <class X>
detail::float_result_t<X> sincos(const X& x, detail::value_t<X>& cosval) {
  cosval = metal::cos(x);
  return metal::sin(x);
}
namespace precise {
template <class X>
detail::float_result_t<X> sincos(const X& x, detail::value_t<X>& cosval) {
  cosval = precise::cos(x);
  return precise::sin(x);
}
}  // namespace precise
namespace fast {
using metal::fma;
template <class X>
detail::float_result_t<X> sincos(const X& x, detail::value_t<X>& cosval) {
  cosval = fast::cos(x);
  return fast::sin(x);
}
}  // namespace fast

// Common functions over integers and floats (MSL §6.2, §6.3): abs, min, max, clamp.
// For floats min/max follow fmin/fmax (a NaN operand yields the other).
namespace detail {
template <class... X>
using numeric_result_t = typename common_value_if<component_sources_v<X...>, X...>::type;
template <class E>
constexpr E min1(E a, E b) {
  if constexpr (std::is_integral_v<E>) return b < a ? b : a;
  else return static_cast<E>(std::fmin(static_cast<float>(a), static_cast<float>(b)));
}
template <class E>
constexpr E max1(E a, E b) {
  if constexpr (std::is_integral_v<E>) return a < b ? b : a;
  else return static_cast<E>(std::fmax(static_cast<float>(a), static_cast<float>(b)));
}
}  // namespace detail

template <class X, class Y>
detail::numeric_result_t<X, Y> min(const X& x, const Y& y) {
  using E = detail::element_t<detail::common_value_t<X, Y>>;
  return detail::zip([](E a, E b) { return detail::min1(a, b); }, x, y);
}
template <class X, class Y>
detail::numeric_result_t<X, Y> max(const X& x, const Y& y) {
  using E = detail::element_t<detail::common_value_t<X, Y>>;
  return detail::zip([](E a, E b) { return detail::max1(a, b); }, x, y);
}
// clamp(x, lo, hi) = min(max(x, lo), hi).
template <class X, class L, class H>
detail::numeric_result_t<X, L, H> clamp(const X& x, const L& lo, const H& hi) {
  using E = detail::element_t<detail::common_value_t<X, L, H>>;
  return detail::zip([](E v, E a, E b) { return detail::min1(detail::max1(v, a), b); }, x, lo, hi);
}
template <class X>
detail::numeric_result_t<X> abs(const X& x) {
  using E = detail::element_t<X>;
  return detail::zip(
      [](E v) -> E {
        if constexpr (std::is_unsigned_v<E>) return v;
        else if constexpr (std::is_integral_v<E>) return static_cast<E>(v < 0 ? -v : v);
        else return static_cast<E>(std::fabs(static_cast<float>(v)));
      },
      x);
}
namespace precise {
using metal::abs;
using metal::clamp;
using metal::max;
using metal::min;
}  // namespace precise
namespace fast {
using metal::abs;
using metal::clamp;
using metal::max;
using metal::min;
}  // namespace fast

// Relational functions (MSL §6.4): a bool, or a bool vector for vectors.
#define METAL_FLOAT_TEST(name, expr)                                                   \
  template <class X, std::enable_if_t<detail::is_float_element_v<X>, int> = 0>         \
  auto name(const X& x) {                                                              \
    return detail::zip([](detail::element_t<X> e) -> bool { const float v = e; return expr; }, x); \
  }
METAL_FLOAT_TEST(isnan, std::isnan(v))
METAL_FLOAT_TEST(isinf, std::isinf(v))
METAL_FLOAT_TEST(isfinite, std::isfinite(v))
METAL_FLOAT_TEST(isnormal, std::isnormal(v))
METAL_FLOAT_TEST(signbit, std::signbit(v))
#undef METAL_FLOAT_TEST

// all / any of a bool vector (a bool scalar is its own answer).
template <class X>
std::enable_if_t<std::is_same_v<detail::element_t<X>, bool>, bool> all(const X& x) {
  for (int i = 0; i < detail::width_v<X>; ++i)
    if (!detail::component(x, i)) return false;
  return true;
}
template <class X>
std::enable_if_t<std::is_same_v<detail::element_t<X>, bool>, bool> any(const X& x) {
  for (int i = 0; i < detail::width_v<X>; ++i)
    if (detail::component(x, i)) return true;
  return false;
}

// select(a, b, c) = c ? b : a, component-wise when c is a bool vector (MSL §6.4).
template <class A, class B, class C>
detail::common_value_t<A, B> select(const A& a, const B& b, const C& c) {
  using R = detail::common_value_t<A, B>;
  if constexpr (!detail::is_vector_like_v<C>) {
    return c ? R(b) : R(a);
  } else {
    static_assert(detail::width_v<C> == detail::width_v<R>, "select: mask width differs");
    using E = detail::element_t<R>;
    R r;
    for (int i = 0; i < detail::width_v<R>; ++i)
      r[i] = detail::component(c, i) ? static_cast<E>(detail::component(b, i))
                                     : static_cast<E>(detail::component(a, i));
    return r;
  }
}

// Geometric functions (MSL §6.6), computed in float and rounded once.
template <class X, class Y>
detail::element_t<detail::float_result_t<X, Y>> dot(const X& x, const Y& y) {
  using V = detail::common_value_t<X, Y>;
  static_assert(detail::is_vector_like_v<V>, "dot takes vectors");
  float s = 0.0f;
  for (int i = 0; i < detail::width_v<V>; ++i)
    s += static_cast<float>(detail::component(x, i)) * static_cast<float>(detail::component(y, i));
  return static_cast<detail::element_t<V>>(s);
}
template <class X>
detail::element_t<detail::float_result_t<X>> length(const X& x) {
  return static_cast<detail::element_t<X>>(std::sqrt(static_cast<float>(dot(x, x))));
}
template <class X>
detail::element_t<detail::float_result_t<X>> length_squared(const X& x) {
  return dot(x, x);
}
template <class X, class Y>
detail::element_t<detail::float_result_t<X, Y>> distance(const X& x, const Y& y) {
  return length(detail::value_t<X>(x) - y);
}
template <class X>
detail::float_result_t<X> normalize(const X& x) {
  const float inv = 1.0f / std::sqrt(static_cast<float>(dot(x, x)));
  return detail::map_float([inv](float v) { return v * inv; }, x);
}
template <class X, class Y>
detail::float_result_t<X, Y> cross(const X& x, const Y& y) {
  using V = detail::common_value_t<X, Y>;
  static_assert(detail::width_v<V> == 3, "cross takes 3-component vectors");
  const V a = x, b = y;
  return V(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}
namespace precise {
using metal::cross;
using metal::distance;
using metal::dot;
using metal::length;
using metal::normalize;
}  // namespace precise
namespace fast {
using metal::cross;
using metal::distance;
using metal::dot;
using metal::length;
using metal::normalize;
}  // namespace fast

}  // namespace metal
