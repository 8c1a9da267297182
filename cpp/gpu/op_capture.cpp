#include "gpu/op_capture.h"

#include <utility>

#include "gpu/metal_backend.h"

namespace metalrt::gpu {
namespace {
thread_local std::unique_ptr<CapturedOp> t_capture;
}  // namespace

bool CapturedOp::Encode(const OpCall& call) {
  if (key_fn_ != nullptr && key_fn_(call) != key_) return false;
  Profiler& profiler = backend_.profiler();
  for (const Entry& e : entries_) {
    const bool profiling = profiler.enabled();
    const Profiler::Clock::time_point start = profiling ? Profiler::Clock::now() : Profiler::Clock::time_point{};
    backend_.stream().Encode(e.dispatch);
    if (profiling) profiler.RecordDispatch(e.kernel, Profiler::SecondsSince(start), e.threadgroups, e.group_threads);
  }
  return true;
}

void CapturedOp::AddDispatch(const MetalBackend& backend, Dispatch dispatch, const std::string& kernel,
                             const uint32_t (&threadgroups)[3], uint32_t group_threads) {
  if (&backend != &backend_) return Spoil();   // a replay encodes into the capture's stream only
  entries_.push_back({std::move(dispatch), kernel, {threadgroups[0], threadgroups[1], threadgroups[2]},
                      group_threads});
}

void CapturedOp::Keep(std::shared_ptr<Storage> storage) {
  if (storage) kept_.push_back(std::move(storage));
}

void CapturedOp::SetKey(HostKeyFn fn, const HostKey& key) {
  key_fn_ = fn;
  key_ = key;
}

CapturedOp* ActiveCapture() { return t_capture.get(); }

void StartCapture(MetalBackend& backend) { t_capture = std::make_unique<CapturedOp>(backend); }

std::unique_ptr<CapturedOp> FinishCapture() {
  std::unique_ptr<CapturedOp> capture = std::move(t_capture);
  if (capture && capture->spoiled()) capture.reset();
  return capture;
}

void SpoilCapture() {
  if (t_capture) t_capture->Spoil();
}

void KeyCapture(HostKeyFn fn, const HostKey& key) {
  if (t_capture) t_capture->SetKey(fn, key);
}

}  // namespace metalrt::gpu
