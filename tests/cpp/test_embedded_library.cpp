// gpu::EmbeddedLibrary (the native device's library when there is no metallib): each
// embedded file compiles on the first use of one of its kernels, once; a file that
// fails is named in its own kernels' errors and the other files' kernels still work.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fake_gpu_device.h"
#include "gpu/embedded_library.h"
#include "sim/sim_device.h"

namespace {

using metalrt::EmbeddedKernelSource;
using metalrt::gpu::EmbeddedLibrary;

// A compiled file: pipelines for the kernels its source names.
class OneFileLibrary : public metalrt::gpu::GpuLibrary {
 public:
  explicit OneFileLibrary(std::vector<std::string> kernels) : kernels_(std::move(kernels)) {}
  std::vector<std::string> function_names() const override { return kernels_; }
  metalrt::gpu::GpuPipeline& pipeline(const std::string& name, const metalrt::gpu::FunctionConstants&) override {
    auto& slot = pipelines_[name];
    if (!slot) slot = std::make_unique<metalrt::testing::FakePipeline>(name, metalrt::testing::FakeKernel{}, metalrt::gpu::FunctionConstants{});
    return *slot;
  }

 private:
  std::vector<std::string> kernels_;
  std::map<std::string, std::unique_ptr<metalrt::testing::FakePipeline>> pipelines_;
};

}  // namespace

TEST_CASE("embedded library: per-file compile on first use, a broken file named, the others working") {
  std::map<std::string, int> compiles;
  EmbeddedLibrary library(
      {{"good.metal", "kernel void add_one"}, {"broken.metal", "kernel void broken_kernel("},
       {"other.metal", "kernel void scale"}},
      {{"add_one", "good.metal"}, {"broken_kernel", "broken.metal"}, {"scale", "other.metal"}},
      [&](const EmbeddedKernelSource& source) -> std::shared_ptr<metalrt::gpu::GpuLibrary> {
        ++compiles[source.file];
        if (source.file == "broken.metal") throw std::runtime_error("program_source:1:30: error: expected ')'");
        return std::make_shared<OneFileLibrary>(std::vector<std::string>{source.source.substr(12)});
      });
  CHECK(compiles.empty());   // nothing compiles up front
  CHECK(library.function_names() == std::vector<std::string>{"add_one", "broken_kernel", "scale"});
  CHECK(library.pipeline("add_one").name() == "add_one");
  CHECK(compiles == std::map<std::string, int>{{"good.metal", 1}});
  for (int attempt = 0; attempt < 2; ++attempt)
    CHECK_THROWS_WITH_AS(library.pipeline("broken_kernel"),
                         doctest::Contains("the embedded kernel source broken.metal does not compile at run "
                                           "time (its kernels are unavailable; other files' kernels still "
                                           "work): program_source:1:30: error: expected ')'"),
                         std::runtime_error);
  CHECK(compiles["broken.metal"] == 1);   // the failure is kept, not retried
  CHECK(library.pipeline("scale").name() == "scale");
  CHECK(library.pipeline("add_one").name() == "add_one");
  CHECK(compiles == std::map<std::string, int>{{"broken.metal", 1}, {"good.metal", 1}, {"other.metal", 1}});
  CHECK(library.summary().find("2 of 3 files compiled") == 0);
  CHECK(library.summary().find("failed: broken.metal") != std::string::npos);
  CHECK_THROWS_AS(library.pipeline("missing"), std::invalid_argument);
}

// The same library over this build's real embedded sources (what a Mac without a
// metallib compiles), compiled on the simulated device, with one file replaced by a
// deliberately broken copy: the broken file's kernels fail naming it; a kernel of
// another file still dispatches and computes.
TEST_CASE("embedded library on the sim: a broken embedded file leaves the other files' kernels working") {
  auto device = metalrt::sim::CreateSimDevice();
  std::vector<EmbeddedKernelSource> sources = metalrt::EmbeddedKernelSources();
  bool broken = false;
  for (EmbeddedKernelSource& source : sources)
    if (source.file == "softmax.metal") {
      source.source += "\nkernel void softmax_extra(device float* x [[buffer(0)]]) { x[0] = undeclared; }\n";
      broken = true;
    }
  REQUIRE(broken);
  std::map<std::string, int> compiles;
  EmbeddedLibrary library(sources, metalrt::EmbeddedKernelFiles(), [&](const EmbeddedKernelSource& source) {
    ++compiles[source.file];
    return device->compile_library(source.source);
  });
  CHECK_THROWS_WITH_AS(library.pipeline("softmax_row_f32"),
                       doctest::Contains("the embedded kernel source softmax.metal does not compile at run time"),
                       std::runtime_error);

  // silu_and_mul_f32 (silu_and_mul.metal): out = silu(gate) * up over 2 rows of 3.
  metalrt::gpu::GpuPipeline& pipeline = library.pipeline("silu_and_mul_f32");
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 3.0f, 4.0f, 5.0f,    // row 0: gate | up
                                -2.0f, 0.0f, 1.0f, 1.0f, -1.0f, 0.5f};  // row 1
  auto in = device->new_buffer(x.size() * sizeof(float));
  std::memcpy(in->contents(), x.data(), x.size() * sizeof(float));
  auto out = device->new_buffer(6 * sizeof(float));
  std::fill_n(static_cast<float*>(out->contents()), 6, std::nanf(""));
  const uint32_t args[2] = {6, 3};   // ElementwiseArgs{n, inner}
  auto cb = device->new_command_buffer();
  auto& enc = cb->compute_encoder();
  enc.set_pipeline(pipeline);
  enc.set_buffer(*in, 0, 0);
  enc.set_buffer(*out, 0, 1);
  enc.set_bytes(args, sizeof args, 2);
  enc.dispatch_threads({6, 1, 1}, {32, 1, 1});
  enc.end_encoding();
  cb->commit();
  cb->wait_until_completed();
  REQUIRE(cb->error().empty());
  const float* y = static_cast<const float*>(out->contents());
  for (int row = 0; row < 2; ++row)
    for (int col = 0; col < 3; ++col) {
      const float gate = x[row * 6 + col], up = x[row * 6 + 3 + col];
      CHECK(y[row * 3 + col] == doctest::Approx(gate / (1.0f + std::exp(-gate)) * up).epsilon(1e-6));
    }
  CHECK(compiles == std::map<std::string, int>{{"silu_and_mul.metal", 1}, {"softmax.metal", 1}});
  CHECK(library.summary().find("failed: softmax.metal") != std::string::npos);
}
