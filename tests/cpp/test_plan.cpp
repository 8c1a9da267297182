// Gates of Plan (metalrt/plan.h) on test-only ops of the CPU and Metal devices (a Metal
// replay encodes the dispatches it kept: gpu/op_capture.h), and of the command stream's
// partial wait (WaitForUses) that a replayed step's host reads and writes use.
#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/op_capture.h"
#include "metal_fixture.h"
#include "metalrt/op_registry.h"
#include "metalrt/plan.h"

using namespace metalrt;
using metalrt::testing::Affine;
using metalrt::testing::MetalFixture;

namespace {

constexpr char kScale[] = "test_plan_scale";   // out = in * factor
constexpr char kOuter[] = "test_plan_outer";   // runs kScale inside its own call
std::vector<std::string> g_trace;

bool Scale(const OpCall& call) {
  g_trace.push_back(kScale);
  const float factor = call.param<float>();
  const Tensor& in = call.inputs[0];
  for (int64_t i = 0; i < in.numel(); ++i)
    call.outputs[0].data_as<float>()[i] = in.data_as<float>()[i] * factor;
  return true;
}

bool Outer(const OpCall& call) {
  g_trace.push_back(kOuter);
  RunOp(kScale, DeviceType::kCPU, OpCall{call.inputs, call.outputs, 2.0f});
  return true;
}

METALRT_REGISTER_PROVIDER(kScale, DeviceType::kCPU, "test_plan_scale_cpu", 0, Scale);
METALRT_REGISTER_PROVIDER(kOuter, DeviceType::kCPU, "test_plan_outer_cpu", 0, Outer);

// Metal test ops, on the process's Metal backend (a plan replays there), each counting
// its provider's runs: y = 2x + 1 through a scratch tensor it frees; z = y * k[0] with
// k read on the host (its capture keyed by it); w = z after a synchronize; v = x times 2
// under decode rows, else 1 (its capture keyed by the setting, as the attention's is).
constexpr char kScratch[] = "test_plan_metal_scratch";
constexpr char kKeyed[] = "test_plan_metal_keyed";
constexpr char kWaits[] = "test_plan_metal_waits";
constexpr char kRowsKeyed[] = "test_plan_metal_rows_keyed";
int g_scratch_runs = 0, g_keyed_runs = 0, g_waits_runs = 0, g_rows_runs = 0;

bool MetalScratch(const OpCall& call) {
  ++g_scratch_runs;
  gpu::MetalBackend& backend = gpu::ActiveMetalBackend();
  const Tensor scratch = Tensor::Empty(call.inputs[0].shape(), DType::kF32, DeviceType::kMETAL);
  Affine(backend, call.inputs[0], scratch, 2.0f, 0.0f);
  Affine(backend, scratch, call.outputs[0], 1.0f, 1.0f);
  return true;
}

gpu::HostKey Factor(const OpCall& call) {
  float factor = call.inputs[1].data_as<float>()[0];
  int32_t bits = 0;
  std::memcpy(&bits, &factor, sizeof(bits));
  return {bits, 0};
}

bool MetalKeyed(const OpCall& call) {
  ++g_keyed_runs;
  const gpu::HostKey key = Factor(call);
  gpu::KeyCapture(&Factor, key);
  Affine(gpu::ActiveMetalBackend(), call.inputs[0], call.outputs[0], call.inputs[1].data_as<float>()[0], 0.0f);
  return true;
}

bool MetalWaits(const OpCall& call) {
  ++g_waits_runs;
  gpu::ActiveMetalBackend().Synchronize();
  Affine(gpu::ActiveMetalBackend(), call.inputs[0], call.outputs[0], 1.0f, 0.0f);
  return true;
}

gpu::HostKey RowsSetting(const OpCall&) { return {DecodeRows() ? 1 : 0, 0, 0}; }
bool MetalRowsKeyed(const OpCall& call) {
  ++g_rows_runs;
  const gpu::HostKey key = RowsSetting(call);
  gpu::KeyCapture(&RowsSetting, key);
  Affine(gpu::ActiveMetalBackend(), call.inputs[0], call.outputs[0], key[0] ? 2.0f : 1.0f, 0.0f);
  return true;
}
METALRT_REGISTER_PROVIDER(kScratch, DeviceType::kMETAL, "test_plan_metal_scratch", 0, MetalScratch);
METALRT_REGISTER_PROVIDER(kKeyed, DeviceType::kMETAL, "test_plan_metal_keyed", 0, MetalKeyed);
METALRT_REGISTER_PROVIDER(kWaits, DeviceType::kMETAL, "test_plan_metal_waits", 0, MetalWaits);
METALRT_REGISTER_PROVIDER(kRowsKeyed, DeviceType::kMETAL, "test_plan_metal_rows_keyed", 0, MetalRowsKeyed);

// A NaN-poisoned f32 Metal tensor of n elements.
Tensor MetalFloats(int64_t n) {
  Tensor t = Tensor::Empty({n}, DType::kF32, DeviceType::kMETAL);
  GetBackend(DeviceType::kMETAL).Synchronize();
  for (int64_t i = 0; i < n; ++i) t.data_as<float>()[i] = std::numeric_limits<float>::quiet_NaN();
  return t;
}

// Host writes and reads of Metal tensors once the device finished its work.
void Put(const Tensor& t, float value) {
  GetBackend(DeviceType::kMETAL).Synchronize();
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = value + static_cast<float>(i);
}
std::vector<float> Get(const Tensor& t) {
  GetBackend(DeviceType::kMETAL).Synchronize();
  return {t.data_as<float>(), t.data_as<float>() + t.numel()};
}

Tensor Vector(std::initializer_list<float> values) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(values.size())}, DType::kF32, DeviceType::kCPU);
  int i = 0;
  for (float v : values) t.data_as<float>()[i++] = v;
  return t;
}

}  // namespace

TEST_CASE("plan: replay reruns the recorded calls over the same tensors, outermost calls only") {
  Tensor x = Vector({1, 2, 3});
  Tensor y = Vector({0, 0, 0});
  Tensor z = Vector({0, 0, 0});
  Plan plan(DeviceType::kCPU);
  plan.BeginRecord();
  RunOp(kScale, DeviceType::kCPU, OpCall{{x}, {y}, 3.0f});
  RunOp(kOuter, DeviceType::kCPU, OpCall{{y}, {z}, {}});
  plan.EndRecord();
  CHECK(plan.state() == Plan::State::kReady);
  CHECK(plan.ops() == std::vector<std::string>{kScale, kOuter});   // not the inner scale
  x.data_as<float>()[0] = 10.0f;
  z.data_as<float>()[0] = -1.0f;
  ResetProviderStats();
  g_trace.clear();
  plan.Replay();
  CHECK(g_trace == std::vector<std::string>{kScale, kOuter, kScale});
  CHECK(y.data_as<float>()[0] == 30.0f);
  CHECK(z.data_as<float>()[0] == 60.0f);
  CHECK(GetProviderStats(kOuter, DeviceType::kCPU).calls == 1);
  CHECK(GetProviderStats(kScale, DeviceType::kCPU).calls == 2);
  CHECK(plan.replays() == 1);
}

TEST_CASE("plan: misuse throws and leaves nothing half-done") {
  Tensor x = Vector({1});
  Plan empty(DeviceType::kCPU);
  CHECK_THROWS_AS(empty.Replay(), std::logic_error);
  CHECK_THROWS_AS(empty.EndRecord(), std::logic_error);

  Plan refused(DeviceType::kMETAL);
  refused.BeginRecord();
  g_trace.clear();
  CHECK_THROWS_WITH_AS(RunOp(kScale, DeviceType::kCPU, OpCall{{x}, {x}, 1.0f}),
                       "[plan] recording on 'metal', but op 'test_plan_scale' runs on 'cpu': a "
                       "plan records one device",
                       std::invalid_argument);
  CHECK(g_trace.empty());   // refused before any provider ran
  refused.EndRecord();
  CHECK(refused.state() == Plan::State::kFailed);
  CHECK_THROWS_AS(refused.Replay(), std::logic_error);

  Plan done(DeviceType::kCPU);
  done.BeginRecord();
  RunOp(kScale, DeviceType::kCPU, OpCall{{x}, {x}, 1.0f});
  {
    Plan nested(DeviceType::kCPU);
    CHECK_THROWS_AS(nested.BeginRecord(), std::logic_error);
  }
  done.EndRecord();
  CHECK_THROWS_AS(done.BeginRecord(), std::logic_error);
  done.Release();
  CHECK(done.state() == Plan::State::kReleased);
  CHECK(done.size() == 0);
  CHECK_THROWS_AS(done.Replay(), std::logic_error);
  {
    Plan abandoned(DeviceType::kCPU);
    abandoned.BeginRecord();
  }   // destroyed while recording: the thread's recording ends with it
  Plan after(DeviceType::kCPU);
  after.BeginRecord();
  after.EndRecord();
  CHECK(after.state() == Plan::State::kReady);
}

TEST_CASE("plan: a Metal replay encodes the kept dispatches; providers rerun on a new host key or a wait") {
  constexpr int64_t n = 40;   // two SIMD-groups, the second partial
  Tensor x = MetalFloats(n), y = MetalFloats(n), z = MetalFloats(n), w = MetalFloats(n), k = MetalFloats(1);
  Put(x, 1.0f);
  Put(k, 3.0f);
  g_scratch_runs = g_keyed_runs = g_waits_runs = 0;
  Plan plan(DeviceType::kMETAL);
  plan.BeginRecord();
  RunOp(kScratch, DeviceType::kMETAL, OpCall{{x}, {y}, {}});
  RunOp(kKeyed, DeviceType::kMETAL, OpCall{{y, k}, {z}, {}});
  RunOp(kWaits, DeviceType::kMETAL, OpCall{{z}, {w}, {}});
  plan.EndRecord();
  REQUIRE(plan.state() == Plan::State::kReady);
  CHECK(Get(w)[5] == 3.0f * (2.0f * 6.0f + 1.0f));
  // The scratch the first op freed is the plan's: a tensor of its size made now gets
  // other memory, which the replays leave alone.
  Tensor other = MetalFloats(n);
  Put(other, 100.0f);
  Put(x, 10.0f);
  ResetProviderStats();
  plan.Replay();
  for (int64_t i = 0; i < n; ++i) {
    const float expected_y = 2.0f * (10.0f + static_cast<float>(i)) + 1.0f;
    REQUIRE(Get(y)[i] == expected_y);
    REQUIRE(Get(w)[i] == 3.0f * expected_y);
    REQUIRE(Get(other)[i] == 100.0f + static_cast<float>(i));
  }
  // Only the op that synchronized ran its provider again; the stats count every call.
  CHECK(g_scratch_runs == 1);
  CHECK(g_keyed_runs == 1);
  CHECK(g_waits_runs == 2);
  CHECK(GetProviderStats(kScratch, DeviceType::kMETAL).calls == 1);
  CHECK(GetProviderStats(kKeyed, DeviceType::kMETAL).calls == 1);
  // A new host-read factor: the keyed provider runs once, and its new dispatches are kept.
  Put(k, 5.0f);
  plan.Replay();
  CHECK(Get(z)[0] == 5.0f * 21.0f);
  plan.Replay();
  CHECK(Get(z)[1] == 5.0f * 23.0f);
  CHECK(g_keyed_runs == 2);
  CHECK(g_scratch_runs == 1);
  CHECK(g_waits_runs == 4);
  CHECK(plan.replays() == 3);
}

TEST_CASE("plan: a Metal replay keys a kept call under the decode-rows setting it was recorded with") {
  constexpr int64_t n = 8;
  Tensor x = MetalFloats(n), v = MetalFloats(n);
  Put(x, 1.0f);
  g_rows_runs = 0;
  Plan plan(DeviceType::kMETAL);
  {
    const DecodeRowsScope rows(true);
    plan.BeginRecord();
    RunOp(kRowsKeyed, DeviceType::kMETAL, OpCall{{x}, {v}, {}});
    plan.EndRecord();
  }
  REQUIRE(plan.state() == Plan::State::kReady);
  CHECK(Get(v)[3] == 8.0f);
  // Replayed outside any scope: the kept dispatches hold (the key is the recorded
  // setting's), so the provider does not run again and the result is the recorded one's.
  REQUIRE_FALSE(DecodeRows());
  Put(x, 10.0f);
  plan.Replay();
  CHECK(Get(v)[3] == 26.0f);
  CHECK(g_rows_runs == 1);
}

TEST_CASE("command stream: WaitForUses waits only for the work that touches the buffer") {
  MetalFixture m;
  m->profiler().Enable(true);
  Tensor a = m.Floats({64});
  Tensor b = m.Floats({64});
  m.Write(a, std::vector<float>(64, 1.0f));
  m.Write(b, std::vector<float>(64, 1.0f));
  m->profiler().Reset();
  Affine(*m, a, a, 2.0f, 0.0f);   // the first command buffer writes a
  m->Flush();
  Affine(*m, b, b, 3.0f, 0.0f);   // the open one only b
  // Reading a waits for the first command buffer; the open one stays open.
  m->PrepareHostRead(a.data(), a.nbytes());
  CHECK(a.data_as<float>()[5] == 2.0f);
  CHECK(m->profiler().commits() == 1);
  CHECK(m->profiler().waits() == 1);
  CHECK(m->stream().open_dispatches() == 1);
  // Nothing pending touches a: no wait. Writing b: the open command buffer uses it.
  m->PrepareHostWrite(a.data(), a.nbytes());
  CHECK(m->profiler().waits() == 1);
  m->PrepareHostWrite(b.data(), b.nbytes());
  CHECK(m->profiler().commits() == 2);
  CHECK(m->profiler().waits() == 2);
  CHECK(b.data_as<float>()[5] == 3.0f);
  // A buffer only read by pending work: a host read does not wait, a host write does.
  Affine(*m, a, b, 1.0f, 1.0f);
  m->Flush();
  m->PrepareHostRead(a.data(), a.nbytes());
  CHECK(m->profiler().waits() == 2);
  m->PrepareHostWrite(a.data(), a.nbytes());
  CHECK(m->profiler().waits() == 3);
}
