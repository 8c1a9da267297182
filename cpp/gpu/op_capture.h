// What a recording plan keeps of one op call on the Metal device (metalrt/plan.h): the
// dispatches its provider encoded, resolved as the command stream takes them (pipeline
// state, buffers at their offsets, argument bytes, grid), so that a replay encodes them
// again without the provider: no kernel-name or pipeline-key strings, no pipeline
// lookup, no binding lists, no heap allocation.
//
// A capture belongs to the thread between MetalBackend::BeginOpCapture and
// EndOpCapture. KernelLaunch adds each dispatch it encodes and keeps the allocation of
// each tensor it binds alive, so a scratch tensor the provider frees stays the plan's
// and the buffer cache never hands it to other work between replays. A call that
// waits for, copies or writes device memory from the host (MetalBackend spoils the
// capture; the CPU reference tier synchronises first) reruns its provider at every
// replay instead.
//
// A provider whose dispatches depend on tensor contents it reads on the host (the
// batch description: query_start_loc, seq_lens) keys its capture (KeyCapture) with the
// choices it made from them and the function that computes them from a call; a replay
// re-encodes while that function gives the same key, and otherwise runs the provider.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/command_stream.h"
#include "metalrt/op_registry.h"
#include "metalrt/tensor.h"

namespace metalrt::gpu {

class MetalBackend;

// The choices a provider made from host-read contents and the thread's decode-rows
// setting (e.g. the decode attention's partitions, prefill tiles and grid rows), and the
// function computing them from a call (a replay calls it under the call's recorded
// setting).
using HostKey = std::array<int64_t, 3>;
using HostKeyFn = HostKey (*)(const OpCall& call);

class CapturedOp final : public EncodedOp {
 public:
  explicit CapturedOp(MetalBackend& backend) : backend_(backend) {}
  // Encodes the kept dispatches in order (profiled like KernelLaunch's); false when
  // the key function gives another key for `call`.
  bool Encode(const OpCall& call) override;

  // KernelLaunch's: a dispatch it encoded on `backend` (with the profiler's figures of
  // it; one on another backend than the capture's spoils it), an allocation it bound.
  void AddDispatch(const MetalBackend& backend, Dispatch dispatch, const std::string& kernel,
                   const uint32_t (&threadgroups)[3], uint32_t group_threads);
  void Keep(std::shared_ptr<Storage> storage);
  void SetKey(HostKeyFn fn, const HostKey& key);
  void Spoil() { spoiled_ = true; }
  bool spoiled() const { return spoiled_; }

 private:
  struct Entry {
    Dispatch dispatch;
    std::string kernel;
    uint32_t threadgroups[3];
    uint32_t group_threads;
  };
  MetalBackend& backend_;
  std::vector<Entry> entries_;
  std::vector<std::shared_ptr<Storage>> kept_;
  HostKeyFn key_fn_ = nullptr;
  HostKey key_{};
  bool spoiled_ = false;
};

// The calling thread's capture in progress, or nullptr.
CapturedOp* ActiveCapture();
// Starts the calling thread's capture (dropping one a raising call left open).
void StartCapture(MetalBackend& backend);
// Ends it: what it kept, or nullptr when none was open or it was spoiled.
std::unique_ptr<CapturedOp> FinishCapture();
// Marks the calling thread's capture, if any, as not replayable without its provider.
void SpoilCapture();
// Called by a provider, while it runs, whose dispatches depend on host-read contents:
// `key` is fn(call) of the call it serves. Nothing outside a capture.
void KeyCapture(HostKeyFn fn, const HostKey& key);

}  // namespace metalrt::gpu
