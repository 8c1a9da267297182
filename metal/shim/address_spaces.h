// MSL address-space qualifiers and the `kernel` function qualifier (MSL spec §4
// "Address spaces", §5.1 "Function qualifiers"). On the CPU all memory is one
// address space, so they expand to nothing, except `constant`: the constant address
// space is read-only (§4.2), so `constant T*` points to const T and accepts the
// address of a `constant` program-scope array (ggml passes its `constexpr constant`
// lookup tables to `constant float*` parameters). `[[attribute]]`s need no macro (the
// generated TUs compile with -Wno-attributes, so C++ ignores them).
//
// Included last by metal_stdlib: these macros would break any standard header
// included after them (e.g. <thread>).
#pragma once

#define device
#define constant const
#define thread
#define threadgroup
#define threadgroup_imageblock
#ifndef kernel   // the generator may give `kernel` a meaning of its own
#define kernel
#endif
#ifndef METAL_FUNC
#define METAL_FUNC inline
#endif
