// Software 16-bit floating-point scalars for MSL `bfloat`, and for `half` where the
// compiler has no `_Float16` (MSL spec §2.1, §2.1.2 "bfloat"; the arithmetic rules of
// §2.12 "Implicit type conversions"). A value stores its 16 bits; every operation
// converts its operands to f32, computes in f32 and rounds the result to the 16-bit
// format with round-to-nearest-even, i.e. each operation is rounded once, as on the
// GPU.
//
// The 16-bit format is a policy class with `from_float` (round-to-nearest-even) and
// `to_float` (exact); half.h and bfloat.h provide the two formats.
#pragma once
#pragma GCC system_header
#include <cstdint>
#include <type_traits>

// MSL `half` is g++'s `_Float16` (g++ >= 12 on x86-64 and arm64 defines
// __FLT16_MAX__): a real arithmetic type, so `c ? h : 1.0f` and the other mixed
// expressions of MSL get C's usual arithmetic conversions (§2.12), where a class
// converting both ways is ambiguous; g++ rounds every _Float16 operation to binary16
// (no excess precision in C++), as the GPU does. Not clang's: clang evaluates a
// _Float16 expression in float and rounds only at assignments and casts (unless
// -ffloat16-excess-precision=none), so there `half` stays the soft_float below.
#if defined(__FLT16_MAX__) && !defined(__clang__)
#define METAL_HALF_IS_FLOAT16 1
#endif

namespace metal {
namespace detail {

constexpr uint32_t float_bits(float f) { return __builtin_bit_cast(uint32_t, f); }
constexpr float bits_float(uint32_t u) { return __builtin_bit_cast(float, u); }

}  // namespace detail

template <class Format>
class soft_float;

template <class T>
inline constexpr bool is_soft_float_v = false;
template <class F>
inline constexpr bool is_soft_float_v<soft_float<F>> = true;

// An MSL 16-bit float scalar (half, bfloat), which the C++ library's traits
// (std::is_arithmetic, std::numeric_limits) do not know in C++17.
template <class T>
inline constexpr bool is_float16_v = is_soft_float_v<T>;
#ifdef METAL_HALF_IS_FLOAT16
template <>
inline constexpr bool is_float16_v<_Float16> = true;
#endif
// An MSL arithmetic scalar: C++'s and the 16-bit floats.
template <class T>
inline constexpr bool is_msl_arithmetic_v = std::is_arithmetic_v<T> || is_float16_v<T>;

template <class Format>
class soft_float {
 public:
  // Like an MSL scalar, a default-initialised value is indeterminate (and the type
  // stays trivial, so it can live in device buffers and unions).
  soft_float() = default;
  // Implicit from every arithmetic type (MSL allows `half h = 1.0f;`): through f32.
  template <class A, std::enable_if_t<std::is_arithmetic_v<A>, int> = 0>
  constexpr soft_float(A a) : bits_(Format::from_float(static_cast<float>(a))) {}
  // Between the two 16-bit formats only explicitly (`half(b)`), through f32.
  template <class F2>
  constexpr explicit soft_float(soft_float<F2> o) : soft_float(static_cast<float>(o)) {}
#ifdef METAL_HALF_IS_FLOAT16
  constexpr explicit soft_float(_Float16 h) : soft_float(static_cast<float>(h)) {}
#endif

  static constexpr soft_float from_bits(uint16_t b) { return soft_float(b, tag{}); }
  constexpr uint16_t bits() const { return bits_; }
  // Implicitly to float (and bool, for conditions); to any other arithmetic type only
  // explicitly (`int(b)`). Templates, deduced from the target type: there is no
  // implicit conversion to int, so `c ? b : 0` has the one reading of MSL §2.12
  // (0 becomes this type) instead of two ambiguous ones.
  template <class T, std::enable_if_t<std::is_same_v<T, float> || std::is_same_v<T, bool>, int> = 0>
  constexpr operator T() const { return static_cast<T>(Format::to_float(bits_)); }
  template <class T, std::enable_if_t<is_msl_arithmetic_v<T> && !std::is_same_v<T, float> &&
                                          !std::is_same_v<T, bool> && !is_soft_float_v<T>, int> = 0>
  constexpr explicit operator T() const { return static_cast<T>(Format::to_float(bits_)); }

  constexpr soft_float operator-() const { return from_bits(bits_ ^ 0x8000u); }
  constexpr soft_float operator+() const { return *this; }
  constexpr soft_float& operator++() { return *this = soft_float(float(*this) + 1.0f); }
  constexpr soft_float& operator--() { return *this = soft_float(float(*this) - 1.0f); }
  constexpr soft_float operator++(int) { soft_float old = *this; ++*this; return old; }
  constexpr soft_float operator--(int) { soft_float old = *this; --*this; return old; }

  // `h op= x` is `h = h op x` converted back to this format (MSL §2.12).
#define METAL_SOFT_COMPOUND(op)                                    \
  template <class B>                                               \
  constexpr soft_float& operator op##=(const B& b) {               \
    return *this = static_cast<soft_float>(*this op b);            \
  }
  METAL_SOFT_COMPOUND(+)
  METAL_SOFT_COMPOUND(-)
  METAL_SOFT_COMPOUND(*)
  METAL_SOFT_COMPOUND(/)
#undef METAL_SOFT_COMPOUND

 private:
  struct tag {};
  constexpr soft_float(uint16_t b, tag) : bits_(b) {}
  uint16_t bits_;
};

namespace detail {

// Result type of a binary operation with a 16-bit float operand (MSL §2.12, usual
// arithmetic conversions): same format with itself or an integer -> that format;
// with float (or a double literal, which MSL treats as float) or the other 16-bit
// format -> float. No type (SFINAE) when neither operand is a 16-bit float or one
// is not a scalar, so vector operators and built-in ones stay untouched.
template <class A, class B, class = void>
struct soft_result {};
template <class A, class B>
struct soft_result<A, B,
                   std::enable_if_t<(is_soft_float_v<A> || is_soft_float_v<B>) &&
                                    is_msl_arithmetic_v<A> && is_msl_arithmetic_v<B>>> {
  static constexpr bool a_wins = is_soft_float_v<A> && (std::is_same_v<A, B> || std::is_integral_v<B>);
  static constexpr bool b_wins = is_soft_float_v<B> && std::is_integral_v<A>;
  using type = std::conditional_t<a_wins, A, std::conditional_t<b_wins, B, float>>;
};
template <class A, class B>
using soft_result_t = typename soft_result<A, B>::type;

}  // namespace detail

// Both operands are converted to the result type first (an integer becomes a
// half before the operation, as in MSL), then computed in f32 and rounded once.
#define METAL_SOFT_ARITH(op)                                                     \
  template <class A, class B, class R = detail::soft_result_t<A, B>>             \
  constexpr R operator op(const A& a, const B& b) {                              \
    return R(static_cast<float>(R(a)) op static_cast<float>(R(b)));              \
  }
METAL_SOFT_ARITH(+)
METAL_SOFT_ARITH(-)
METAL_SOFT_ARITH(*)
METAL_SOFT_ARITH(/)
#undef METAL_SOFT_ARITH

// `x op= b` with an arithmetic x: `x = x op b` converted to x's type (MSL §2.12); C++'s
// built-in compound assignments do not try a conversion function template.
#define METAL_SOFT_COMPOUND_LHS(op)                                                        \
  template <class L, class F, std::enable_if_t<is_msl_arithmetic_v<L> && !is_soft_float_v<L>, int> = 0> \
  constexpr L& operator op##=(L& l, const soft_float<F>& r) {                               \
    return l = static_cast<L>(l op r);                                                     \
  }
METAL_SOFT_COMPOUND_LHS(+)
METAL_SOFT_COMPOUND_LHS(-)
METAL_SOFT_COMPOUND_LHS(*)
METAL_SOFT_COMPOUND_LHS(/)
#undef METAL_SOFT_COMPOUND_LHS

#define METAL_SOFT_COMPARE(op)                                                   \
  template <class A, class B, class R = detail::soft_result_t<A, B>>             \
  constexpr bool operator op(const A& a, const B& b) {                           \
    return static_cast<float>(R(a)) op static_cast<float>(R(b));                 \
  }
METAL_SOFT_COMPARE(==)
METAL_SOFT_COMPARE(!=)
METAL_SOFT_COMPARE(<)
METAL_SOFT_COMPARE(>)
METAL_SOFT_COMPARE(<=)
METAL_SOFT_COMPARE(>=)
#undef METAL_SOFT_COMPARE

}  // namespace metal
