// Plan: a step's op calls recorded once and replayed from C++.
//
// While a plan records, every op call RunOp makes on the recording thread (the
// outermost ones: ops a provider runs internally are part of its call) is run as usual
// and kept: op, provider that served it, inputs, outputs and params, and on a device
// that batches work (Metal) the dispatches the call encoded (Backend::BeginOpCapture).
// Replay() reruns those calls, in order, over the same tensors: no entry point
// validation, no output allocation, no provider search. A call with kept dispatches
// encodes them again as recorded (pipelines, bindings, argument bytes, grids: no
// allocation), unless the host-read contents they were chosen from changed (a batch's
// query_start_loc or seq_lens: EncodedOp::Encode), when its provider runs again and
// what it encodes is kept; any other call reruns its provider. What a step changes
// (token ids, positions, slot mapping, block tables, seq lens) must therefore live in
// tensors the recording already used, which the caller rewrites between replays; the
// outputs are the recorded ones, overwritten by each replay.
//
// The plan holds every tensor it recorded, so none is freed under it; Release() drops
// them, and a released plan refuses to replay. A plan records one device: an op on
// another device during the recording is refused (std::invalid_argument) and the
// plan cannot be replayed. Index values are not rechecked by a replay (the entry
// points checked them when recording): the caller writes valid ones.
//
// On a device that batches work (Metal), Replay() commits a small first command
// buffer after `first_commit_ops` ops so the GPU starts at once, and commits the rest
// when it returns, so the step runs while the host waits for an earlier one. A plan
// is used by one thread at a time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "metalrt/device.h"

namespace metalrt {

class Plan {
 public:
  enum class State : uint8_t { kEmpty, kRecording, kReady, kFailed, kReleased };
  // Ops after which a replay commits its first command buffer (0: none early).
  static constexpr size_t kDefaultFirstCommitOps = 4;

  explicit Plan(DeviceType device, size_t first_commit_ops = kDefaultFirstCommitOps);
  ~Plan();   // ends a recording still in progress (the plan is then failed)
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // Starts recording the calling thread's op calls. std::logic_error when the plan was
  // recorded before or another plan records on this thread.
  void BeginRecord();
  // Ends the recording: the plan is ready, or failed when an op was refused.
  // `ok` = false (the recorded step raised) fails it too. std::logic_error when not
  // recording on this thread.
  void EndRecord(bool ok = true);
  // Reruns the recorded calls. std::logic_error unless the plan is ready, or when
  // another plan records on this thread (its replayed ops would be missing there).
  void Replay();
  // Drops the recorded calls and the tensors they hold.
  void Release();

  State state() const { return state_; }
  DeviceType device() const { return device_; }
  size_t size() const;                    // recorded op calls
  std::vector<std::string> ops() const;   // their op names, in order
  uint64_t replays() const { return replays_; }

 private:
  class Recorder;
  // Ends a recording in progress: the observer, and a capture its last call left open.
  void StopRecording();
  DeviceType device_;
  size_t first_commit_ops_;
  State state_ = State::kEmpty;
  uint64_t replays_ = 0;
  std::unique_ptr<Recorder> recorder_;
};

const char* PlanStateName(Plan::State state);   // "empty", "recording", ...

}  // namespace metalrt
