// Builds MSL source into a loadable module at run time: the generator
// (python/metalrt/_sim/msl_to_cpp.py) turns it into C++ and its reflection, the
// system C++ compiler (`$CXX`, else `c++`) into a shared object. Once per source: results are cached
// by a hash of the source, the generator, the shim headers and the compiler
// command, under $METALRT_CACHE_DIR/kernels or ~/.cache/metalrt/kernels.
#pragma once
#include <string>

namespace metalrt::sim {

// Where the generator and the shim headers are. Defaults: $METALRT_SIM_PYTHON
// (else "python3"), the source tree the library was built from; the Python package
// points them at its installed copies on import.
struct KernelToolchain {
  std::string python;
  std::string generator;   // path of msl_to_cpp.py
  std::string shim_dir;    // directory holding metal_stdlib, sim_hooks.h, sim_module.h
};
void SetKernelToolchain(const KernelToolchain& toolchain);
KernelToolchain GetKernelToolchain();

// A built module: the shared object's path and the generator's reflection of the
// source (JSON, kept beside the shared object), from the one generator run.
struct KernelModule {
  std::string path;
  std::string reflection;
};

// The module for `source`, building it if needed. Throws
// std::runtime_error("[compile_library] ...") with the generator's or the
// compiler's message (which names shader.metal:line) on failure.
KernelModule BuildKernelModule(const std::string& source);

}  // namespace metalrt::sim
