// MSL scalar type names (MSL spec §2.1 "Scalar data types"): `uint`, `ushort`,
// `uchar` and the 64-bit `ulong` are built-in names in MSL, so they are declared
// at global scope here. glibc's <sys/types.h> declares the same typedefs, which
// C++ allows (a typedef may be redeclared to the same type).
#pragma once
#pragma GCC system_header
#include <cstdint>

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;

static_assert(sizeof(ulong) == 8, "MSL ulong is 64 bits: an LP64 host is required");
static_assert(sizeof(long) == 8, "MSL long is 64 bits: an LP64 host is required");
// MSL `char` is signed (spec §2.1); C++ leaves it to the target (unsigned on arm64
// Linux). Every compile of MSL as C++ passes -fsigned-char.
static_assert(static_cast<char>(-1) < 0, "MSL char is signed: compile the shim with -fsigned-char");

namespace metal {
using ::uchar;
using ::ushort;
using ::uint;
using ::ulong;
// MSL §2.1: size_t / ptrdiff_t are 64-bit.
using size_t = ::std::size_t;
using ptrdiff_t = ::std::ptrdiff_t;
}  // namespace metal
