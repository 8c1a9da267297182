// metal:: type traits (MSL spec §6.1 "Header files": <metal_type_traits>): the
// standard ones, plus the MSL view in which half and bfloat are floating-point
// arithmetic scalars and vectors are their own category.
#pragma once
#pragma GCC system_header
#include <type_traits>

#include "vec_traits.h"

namespace metal {

using std::bool_constant;
using std::conditional;
using std::conditional_t;
using std::decay;
using std::decay_t;
using std::enable_if;
using std::enable_if_t;
using std::false_type;
using std::integral_constant;
using std::is_convertible;
using std::is_convertible_v;
using std::is_integral;
using std::is_integral_v;
using std::is_same;
using std::is_same_v;
using std::is_unsigned;
using std::is_unsigned_v;
using std::make_signed;
using std::make_signed_t;
using std::make_unsigned;
using std::make_unsigned_t;
using std::remove_const;
using std::remove_const_t;
using std::remove_cv;
using std::remove_cv_t;
using std::remove_reference;
using std::remove_reference_t;
using std::true_type;

template <class T>
struct is_floating_point
    : bool_constant<std::is_floating_point_v<remove_cv_t<T>> || is_float16_v<remove_cv_t<T>>> {};
template <class T>
inline constexpr bool is_floating_point_v = is_floating_point<T>::value;
template <class T>
struct is_arithmetic : bool_constant<std::is_integral_v<T> || is_floating_point_v<T>> {};
template <class T>
inline constexpr bool is_arithmetic_v = is_arithmetic<T>::value;
template <class T>
struct is_scalar : is_arithmetic<T> {};
template <class T>
inline constexpr bool is_scalar_v = is_scalar<T>::value;
template <class T>
struct is_signed : bool_constant<std::is_signed_v<T> || is_float16_v<remove_cv_t<T>>> {};
template <class T>
inline constexpr bool is_signed_v = is_signed<T>::value;
template <class T>
struct is_vector : bool_constant<detail::is_vector_like_v<T>> {};
template <class T>
inline constexpr bool is_vector_v = is_vector<T>::value;
// Number of components of a vector type (1 for a scalar).
template <class T>
struct vec_elements : integral_constant<int, detail::width_v<T>> {};

}  // namespace metal
