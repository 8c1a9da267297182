// METALRT_CONSTANT: a compile-time constant shared by host C++ (cpp/gpu/<op>.cpp) and
// MSL. MSL requires program-scope variables to be in the constant address space
// (MSL 3.1 §4.2), which host C++ does not have: `constant constexpr` in MSL,
// `constexpr` in C++.
#ifndef METALRT_METAL_CONSTANTS_H_
#define METALRT_METAL_CONSTANTS_H_

#ifdef __METAL_VERSION__
#define METALRT_CONSTANT constant constexpr
#else
#define METALRT_CONSTANT constexpr
#endif

#endif  // METALRT_METAL_CONSTANTS_H_
