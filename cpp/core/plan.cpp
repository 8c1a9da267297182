#include "metalrt/plan.h"

#include <stdexcept>
#include <utility>

#include "metalrt/op_registry.h"

namespace metalrt {

// Receives the recording thread's op calls (op_registry.h's observer).
class Plan::Recorder final : public OpObserver {
 public:
  explicit Recorder(DeviceType device) : device_(device) {}

  void Before(const OpId& op, DeviceType device) override {
    if (device == device_) {
      GetBackend(device_).BeginOpCapture();
      capturing = true;
      return;
    }
    refused_ = true;
    throw std::invalid_argument(std::string("[plan] recording on '") + DeviceTypeName(device_) +
                                "', but op '" + op + "' runs on '" + DeviceTypeName(device) +
                                "': a plan records one device");
  }
  void After(RecordedOp&& recorded) override {
    calls.push_back(std::move(recorded));
    encoded.push_back(GetBackend(device_).EndOpCapture());
    capturing = false;
  }

  bool refused() const { return refused_; }
  std::vector<RecordedOp> calls;
  // What each call encoded (EncodedOp), or nullptr where a replay reruns its provider.
  std::vector<std::unique_ptr<EncodedOp>> encoded;
  bool capturing = false;   // Before() began a capture that no After() ended (it raised)

 private:
  DeviceType device_;
  bool refused_ = false;
};

namespace {

// Encodes a call's kept dispatches again, their key computed under the decode-rows
// setting the call was recorded with (as RunRecorded runs it).
bool EncodeKept(EncodedOp& kept, const RecordedOp& recorded) {
  const DecodeRowsScope decode_rows(recorded.decode_rows);
  return kept.Encode(recorded.call);
}

}  // namespace

Plan::Plan(DeviceType device, size_t first_commit_ops)
    : device_(device), first_commit_ops_(first_commit_ops) {}

Plan::~Plan() { StopRecording(); }

void Plan::StopRecording() {
  if (state_ != State::kRecording) return;
  SetOpObserver(nullptr);
  if (recorder_->capturing) GetBackend(device_).EndOpCapture();   // its provider raised
  recorder_->capturing = false;
}

void Plan::BeginRecord() {
  if (state_ != State::kEmpty)
    throw std::logic_error(std::string("[plan] a plan records once; this one is ") +
                           PlanStateName(state_));
  auto recorder = std::make_unique<Recorder>(device_);
  OpObserver* previous = SetOpObserver(recorder.get());
  if (previous != nullptr) {
    SetOpObserver(previous);
    throw std::logic_error("[plan] another plan is recording on this thread");
  }
  recorder_ = std::move(recorder);
  state_ = State::kRecording;
}

void Plan::EndRecord(bool ok) {
  if (state_ != State::kRecording)
    throw std::logic_error(std::string("[plan] end of a recording that did not begin; the plan is ") +
                           PlanStateName(state_));
  StopRecording();
  state_ = ok && !recorder_->refused() ? State::kReady : State::kFailed;
  if (state_ == State::kFailed) {
    recorder_->calls.clear();
    recorder_->encoded.clear();
  }
}

void Plan::Replay() {
  if (state_ != State::kReady) {
    const char* why = state_ == State::kReleased ? " (release() freed its tensors)"
                      : state_ == State::kFailed ? " (its recording raised or was refused)"
                                                 : "";
    throw std::logic_error(std::string("[plan] only a recorded plan replays; this one is ") +
                           PlanStateName(state_) + why);
  }
  OpObserver* other = SetOpObserver(nullptr);
  SetOpObserver(other);
  if (other != nullptr)
    throw std::logic_error("[plan] replay while another plan records on this thread");
  Backend& backend = GetBackend(device_);
  const std::vector<RecordedOp>& calls = recorder_->calls;
  std::vector<std::unique_ptr<EncodedOp>>& encoded = recorder_->encoded;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!encoded[i]) {
      RunRecorded(calls[i]);
    } else if (EncodeKept(*encoded[i], calls[i])) {
      CountReplayed(calls[i]);
    } else {
      // The host-read contents the dispatches depend on changed: the provider runs,
      // and what it encodes now is kept for the next replays.
      backend.BeginOpCapture();
      try {
        RunRecorded(calls[i]);
      } catch (...) {
        backend.EndOpCapture();
        throw;
      }
      encoded[i] = backend.EndOpCapture();
    }
    if (i + 1 == first_commit_ops_) backend.Flush();
  }
  backend.Flush();
  ++replays_;
}

void Plan::Release() {
  StopRecording();
  recorder_.reset();
  state_ = State::kReleased;
}

size_t Plan::size() const { return recorder_ ? recorder_->calls.size() : 0; }

std::vector<std::string> Plan::ops() const {
  std::vector<std::string> names;
  if (recorder_)
    for (const RecordedOp& call : recorder_->calls) names.push_back(call.op);
  return names;
}

const char* PlanStateName(Plan::State state) {
  switch (state) {
    case Plan::State::kEmpty: return "empty";
    case Plan::State::kRecording: return "recording";
    case Plan::State::kReady: return "ready";
    case Plan::State::kFailed: return "failed";
    case Plan::State::kReleased: return "released";
  }
  return "unknown";
}

}  // namespace metalrt
