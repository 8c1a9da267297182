// MSL atomics (MSL spec §2.5 "Atomic data types", §6.15 "Atomic functions"):
// atomic<T> for int, uint, bool, ulong and float (atomic_int, atomic_uint,
// atomic_bool, atomic_ulong, atomic_float), with the C-style *_explicit functions.
//
// Threadgroups run concurrently on several OS threads, so these are real atomics
// (GCC/Clang __atomic builtins; a compare-exchange loop for float arithmetic and for
// min/max). atomic<T> has exactly the layout of T, so a `device atomic_uint*` may
// point into a buffer of uint.
#pragma once
#pragma GCC system_header
#include <type_traits>

#include "scalar_types.h"
#include "vec_traits.h"

namespace metal {

enum memory_order {
  memory_order_relaxed = __ATOMIC_RELAXED,
  memory_order_acquire = __ATOMIC_ACQUIRE,
  memory_order_release = __ATOMIC_RELEASE,
  memory_order_acq_rel = __ATOMIC_ACQ_REL,
  memory_order_seq_cst = __ATOMIC_SEQ_CST,
};

template <class T>
struct atomic {
  static_assert(std::is_integral_v<T> || std::is_same_v<T, float>,
                "MSL atomics hold int, uint, bool, ulong or float");
  T value_;
};

using atomic_int = atomic<int>;
using atomic_uint = atomic<uint>;
using atomic_bool = atomic<bool>;
using atomic_ulong = atomic<ulong>;
using atomic_float = atomic<float>;
static_assert(sizeof(atomic_uint) == sizeof(uint) && alignof(atomic_uint) == alignof(uint));
static_assert(sizeof(atomic_float) == sizeof(float) && alignof(atomic_float) == alignof(float));

namespace detail {

// A compare-exchange is only defined with a failure order no stronger than the
// success order and without release semantics.
constexpr int failure_order(memory_order order) {
  return order == memory_order_acq_rel ? __ATOMIC_ACQUIRE
         : order == memory_order_release ? __ATOMIC_RELAXED
                                         : static_cast<int>(order);
}

// Applies `next = f(old)` atomically; returns the old value.
template <class T, class F>
T atomic_update(volatile atomic<T>* object, F f, memory_order order) {
  T old;
  __atomic_load(&object->value_, &old, __ATOMIC_RELAXED);
  T next = f(old);
  while (!__atomic_compare_exchange(&object->value_, &old, &next, true, order,
                                    failure_order(order))) {
    next = f(old);
  }
  return old;
}

}  // namespace detail

template <class T>
void atomic_store_explicit(volatile atomic<T>* object, detail::type_identity_t<T> desired,
                           memory_order order) {
  __atomic_store(&object->value_, &desired, order);
}
template <class T>
T atomic_load_explicit(const volatile atomic<T>* object, memory_order order) {
  T value;
  __atomic_load(&object->value_, &value, order);
  return value;
}
template <class T>
T atomic_exchange_explicit(volatile atomic<T>* object, detail::type_identity_t<T> desired,
                           memory_order order) {
  T old;
  __atomic_exchange(&object->value_, &desired, &old, order);
  return old;
}
// On failure *expected receives the current value (MSL §6.15.2).
template <class T>
bool atomic_compare_exchange_weak_explicit(volatile atomic<T>* object, T* expected,
                                           detail::type_identity_t<T> desired,
                                           memory_order success, memory_order failure) {
  return __atomic_compare_exchange(&object->value_, expected, &desired, true, success, failure);
}

// Integer add/sub/and/or/xor map to single builtins; float add/sub and every
// min/max use the compare-exchange loop.
template <class T>
T atomic_fetch_add_explicit(volatile atomic<T>* object, detail::type_identity_t<T> operand,
                            memory_order order) {
  if constexpr (std::is_integral_v<T>) return __atomic_fetch_add(&object->value_, operand, order);
  else return detail::atomic_update(object, [operand](T old) { return old + operand; }, order);
}
template <class T>
T atomic_fetch_sub_explicit(volatile atomic<T>* object, detail::type_identity_t<T> operand,
                            memory_order order) {
  if constexpr (std::is_integral_v<T>) return __atomic_fetch_sub(&object->value_, operand, order);
  else return detail::atomic_update(object, [operand](T old) { return old - operand; }, order);
}
template <class T>
T atomic_fetch_min_explicit(volatile atomic<T>* object, detail::type_identity_t<T> operand,
                            memory_order order) {
  return detail::atomic_update(object, [operand](T old) { return operand < old ? operand : old; }, order);
}
template <class T>
T atomic_fetch_max_explicit(volatile atomic<T>* object, detail::type_identity_t<T> operand,
                            memory_order order) {
  return detail::atomic_update(object, [operand](T old) { return old < operand ? operand : old; }, order);
}
template <class T>
T atomic_fetch_and_explicit(volatile atomic<T>* object, detail::type_identity_t<T> operand,
                            memory_order order) {
  static_assert(std::is_integral_v<T>, "atomic_fetch_and needs an integer atomic");
  return __atomic_fetch_and(&object->value_, operand, order);
}
template <class T>
T atomic_fetch_or_explicit(volatile atomic<T>* object, detail::type_identity_t<T> operand,
                           memory_order order) {
  static_assert(std::is_integral_v<T>, "atomic_fetch_or needs an integer atomic");
  return __atomic_fetch_or(&object->value_, operand, order);
}
template <class T>
T atomic_fetch_xor_explicit(volatile atomic<T>* object, detail::type_identity_t<T> operand,
                            memory_order order) {
  static_assert(std::is_integral_v<T>, "atomic_fetch_xor needs an integer atomic");
  return __atomic_fetch_xor(&object->value_, operand, order);
}

}  // namespace metal
