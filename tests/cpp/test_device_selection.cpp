// The native-device rule (gpu/device_selection.h) over the capability sets real Macs
// report: an M-series Mac is accepted; a macOS VM's "Apple Paravirtual device"
// (family apple5), Intel and AMD GPUs (no Apple family), macOS 13 and a device
// without unified memory are refused with the reason METALRT_METAL=native shows.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "gpu/device_selection.h"
#include "gpu/metal_backend.h"

using metalrt::gpu::NativeGpuCapabilities;
using metalrt::gpu::NativeGpuRefusal;

namespace {
NativeGpuCapabilities M2Pro() { return {"Apple M2 Pro", 8, 14, 5, true}; }
}  // namespace

TEST_CASE("device selection: Apple7+ GPUs on macOS 14+ with unified memory run the kernels") {
  CHECK(NativeGpuRefusal(M2Pro()) == "");
  CHECK(NativeGpuRefusal({"Apple M1", 7, 14, 0, true}) == "");
  CHECK(NativeGpuRefusal({"Apple M4 Max", 9, 26, 1, true}) == "");
}

TEST_CASE("device selection: GPUs below apple7 are refused, naming the family") {
  CHECK(NativeGpuRefusal({"Apple Paravirtual device", 5, 15, 2, true}) ==
        "'Apple Paravirtual device' is GPU family apple5; the kernels need apple7 or later "
        "(32-wide SIMD-group reductions and matrices, bfloat)");
  CHECK(NativeGpuRefusal({"Apple A13 GPU", 6, 14, 0, true}).find("GPU family apple6") != std::string::npos);
  // Intel and AMD Macs support no Apple family (AMD's SIMD width is 64).
  CHECK(NativeGpuRefusal({"AMD Radeon Pro 5500M", 0, 14, 0, false}) ==
        "'AMD Radeon Pro 5500M' is not an Apple GPU family; the kernels need apple7 or later "
        "(32-wide SIMD-group reductions and matrices, bfloat)");
  CHECK(NativeGpuRefusal({"Intel(R) UHD Graphics 630", 0, 13, 6, true}).find("not an Apple GPU family") !=
        std::string::npos);
}

TEST_CASE("device selection: macOS below 14 is refused; so is a GPU without unified memory") {
  NativeGpuCapabilities ventura = M2Pro();
  ventura.os_major = 13;
  ventura.os_minor = 6;
  CHECK(NativeGpuRefusal(ventura) ==
        "'Apple M2 Pro' runs macOS 13.6; the kernels need macOS 14.0 or later (Metal Shading Language 3.1)");
  NativeGpuCapabilities discrete = M2Pro();
  discrete.unified_memory = false;
  CHECK(NativeGpuRefusal(discrete) ==
        "'Apple M2 Pro' has no unified memory; every metalrt buffer is shared storage");
}

TEST_CASE("device selection: the account of the choice says which device serves and why") {
  std::string selection;
  setenv("METALRT_METAL", "sim", 1);
  auto forced = metalrt::gpu::SelectGpuDevice(&selection);
  unsetenv("METALRT_METAL");
  CHECK(forced->is_simulated());
  CHECK(selection == "sim (METALRT_METAL=sim)");
#if !defined(__APPLE__)
  auto chosen = metalrt::gpu::SelectGpuDevice(&selection);
  CHECK(chosen->is_simulated());
  CHECK(selection ==
        "sim: native unavailable: metalrt was built without the Metal.framework device (not on macOS)");
  CHECK(metalrt::gpu::ActiveMetalBackend().selection().rfind("sim", 0) == 0);
#endif
}
