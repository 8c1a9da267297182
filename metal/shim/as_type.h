// as_type<T>(x) (MSL spec §2.13 "Type conversions and re-interpreting data"):
// reinterprets the bits of a scalar or vector as another type of the same size.
#pragma once
#pragma GCC system_header
#include <cstring>

#include "vec_types.h"

namespace metal {

template <class To, class From>
To as_type(const From& from) {
  const detail::value_t<From> value = from;   // a swizzle reinterprets its value
  static_assert(sizeof(To) == sizeof(value), "as_type: the two types must have the same size");
  To to;
  std::memcpy(static_cast<void*>(&to), &value, sizeof(To));
  return to;
}

}  // namespace metal
