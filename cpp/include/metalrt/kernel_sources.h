// The project's kernels as MSL source, one self-contained string per metal/*.metal
// file (project headers inlined), generated at build time on every platform by
// cpp/metal/embed_kernel_sources.py. The native device compiles them at run time when
// the build had no Metal compiler (no metalrt.metallib); a gate compiles each on the
// simulated device and checks it defines the same kernels as the built-in library.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace metalrt {

struct EmbeddedKernelSource {
  std::string file;     // "rms_norm.metal"
  std::string source;   // MSL, compilable on its own
};

// In file-name order.
const std::vector<EmbeddedKernelSource>& EmbeddedKernelSources();

// Kernel name -> the file (EmbeddedKernelSource::file) defining it, as the MSL
// generator registered the same files for the simulated device (cpp/sim/library.cpp).
// tests/python/test_kernel_sources.py proves each string defines exactly its kernels.
std::map<std::string, std::string> EmbeddedKernelFiles();

}  // namespace metalrt
