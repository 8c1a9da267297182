// Gate of the shim's address-space qualifiers (metal/shim/address_spaces.h, MSL spec
// §4): `constant` is read-only, so a `constant T*` parameter takes the address of a
// `constexpr constant` program-scope table, as ggml's best_index_int8 is called with
// kvalues_iq4nl_f; the other qualifiers leave the type unchanged.
#include <doctest/doctest.h>

#include <cmath>
#include <type_traits>

#include "address_spaces.h"   // last: its macros would break headers included after it

namespace {

constexpr constant static float kTable[5] = {-2.0f, -0.5f, 0.0f, 1.5f, 4.0f};

// Index of the table entry nearest x.
int Nearest(constant float* table, int n, float x) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (std::fabs(x - table[i]) < std::fabs(x - table[best])) best = i;
  return best;
}

}  // namespace

static_assert(std::is_same_v<constant float*, const float*>, "constant memory is read-only (MSL §4.2)");
static_assert(std::is_same_v<device float*, float*>, "device memory is writable");
static_assert(std::is_same_v<threadgroup int*, int*>, "threadgroup memory is writable");

TEST_CASE("constant T* parameters take constexpr constant program-scope tables") {
  CHECK(Nearest(kTable, 5, -3.0f) == 0);
  CHECK(Nearest(kTable, 5, -0.4f) == 1);
  CHECK(Nearest(kTable, 5, 0.3f) == 2);
  CHECK(Nearest(kTable, 5, 1.4f) == 3);
  CHECK(Nearest(kTable, 5, 9.0f) == 4);
}
