// MSL address-space qualifiers and the `kernel` function qualifier (MSL spec §4
// "Address spaces", §5.1 "Function qualifiers"). On the CPU all memory is one
// address space, so they expand to nothing; `[[attribute]]`s need no macro (the
// generated TUs compile with -Wno-attributes, so C++ ignores them).
//
// Included last by metal_stdlib: these macros would break any standard header
// included after them (e.g. <thread>).
#pragma once

#define device
#define constant
#define thread
#define threadgroup
#define threadgroup_imageblock
#ifndef kernel   // the generator may give `kernel` a meaning of its own
#define kernel
#endif
#ifndef METAL_FUNC
#define METAL_FUNC inline
#endif
