// gpu::EmbeddedLibrary (the native device's library when there is no metallib): each
// embedded file compiles on the first use of one of its kernels, once; a file that
// fails is named in its own kernels' errors and the other files' kernels still work.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fake_gpu_device.h"
#include "gpu/embedded_library.h"

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
