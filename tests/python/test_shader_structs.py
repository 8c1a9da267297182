"""Struct sizes compile_shader checks ``bytes`` arguments against
(metalrt._sim.msl_structs), laid out by MSL 3.1's rules (§2.1-2.3, Table 2.2): vectors
aligned to their size with 3 components taking 4, packed vectors to their scalar,
matrices as column vectors, arrays, nested structs, typedef'd structs as ggml writes
them; a struct with a member that cannot be laid out is left unknown (unchecked)."""
from metalrt._sim.msl_structs import struct_sizes

SOURCE = """
struct Plain { int n; float mul; float add; int unused; };   // 16
typedef struct{
    int32_t  ne00;      // a comment; with a semicolon
    uint64_t nb01;      /* aligned to 8: 4 bytes of padding before it */
    int16_t  r, s[3];
} kargs_t;                                                     // 4 + 4 + 8 + 2 + 6 = 24
struct Vectors { float3 a; packed_float3 b; half c; };        // 16 + 12 + 2 -> 32
struct Matrix { float3x3 m; char tag; };                      // 48 + 1 -> 64
struct Nested { char c; Vectors v[2]; };                      // 16 + 64 = 80
struct Halves { half2 h; uchar u; };                          // 4 + 1 -> 8
struct Sizes { uint n; size_t nb; };                          // size_t is 64-bit: 16
struct Templated { T value; };
struct WithMethod { int n; int twice() const { return 2 * n; } };
struct Atomic { atomic_uint count; };
"""


def test_sizes_follow_msl_layout():
    assert struct_sizes(SOURCE) == {"Plain": 16, "kargs_t": 24, "Vectors": 32, "Matrix": 64,
                                    "Nested": 80, "Halves": 8, "Sizes": 16}
