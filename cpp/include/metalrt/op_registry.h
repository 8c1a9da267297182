// The op registry: (op, device) -> providers, tried in a fixed order.
//
// A provider is a function that runs one op on one device, or declines (returns
// false) when it cannot handle the call (e.g. a dtype it has no kernel for); the
// next provider is then tried. Providers are ordered by descending priority, then
// by name, so the order never depends on static-initialisation order. The runtime's
// providers are registered by tier (ProviderTier), which gives both the priority and
// the name; each provider declines by its own thresholds what a lower tier serves.
//
// Reference tier: on a unified-memory device (Metal on Apple silicon) an op with no
// native provider, or whose native providers all decline, runs on the CPU provider
// after the device is synchronised. The stats then name the reference tier
// ("reference:<cpu provider>") and its hit counter moves. OpRegistered() is true
// only when a native provider exists.
#pragma once
#include <any>
#include <cstdint>
#include <string>
#include <vector>

#include "metalrt/device.h"
#include "metalrt/tensor.h"

namespace metalrt {

using OpId = std::string;   // the op's snake_case name, e.g. "rms_norm"

// What a provider receives. Inputs and outputs are validated and allocated by the
// op's entry point (ops.h) before any provider runs.
struct OpCall {
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  std::any params;   // the op's parameter struct from ops.h (or empty)

  template <typename P>
  const P& param() const { return std::any_cast<const P&>(params); }
};

// Returns true when it ran the op, false to decline.
using ProviderFn = bool (*)(const OpCall& call);

struct ProviderStats {
  std::string last_selected;   // provider name, or "reference:<name>"; "" if never run
  uint64_t calls = 0;          // successful runs of the op on this device
  uint64_t declines = 0;       // provider declines seen while running it
  uint64_t reference_hits = 0; // runs served by the CPU reference tier
};

// What a provider is, tried in this order on the CPU (highest first). The prefill tiers
// take products of more than kGemvMaxRows rows (cpp/cpu/fast/gemv/matmul_dispatch.h)
// and batches holding a prefill, and decline the rest, so they go ahead of the fast tier,
// whose decode providers serve what they decline; the oracle serves everything last.
enum class ProviderTier {
  kOracle,       // "cpu_<op>": the numerical reference (cpp/cpu)
  kFast,         // "cpu_fast_<op>": decode-sized SIMD kernels (cpp/cpu/fast)
  kPrefill,      // "cpu_blas_<op>": the f32 BLAS prefill GEMMs (cpp/cpu/fast/prefill/blas)
  kPrefillBf16,  // "cpu_bf16_<op>": the bf16/AMX prefill GEMMs (cpp/cpu/fast/prefill)
  kNative,       // "metal_<op>": a GPU device's own kernels (cpp/gpu)
};

// The name of the tier's provider of `op` on `device` (e.g. "cpu_fast_rms_norm").
// std::logic_error for kNative on the CPU or a CPU tier on another device.
std::string ProviderName(const OpId& op, DeviceType device, ProviderTier tier);

void RegisterProvider(const OpId& op, DeviceType device, const std::string& name,
                      int priority, ProviderFn fn);
// Registers `fn` as the tier's provider of `op`, named by ProviderName.
void RegisterProvider(const OpId& op, DeviceType device, ProviderTier tier, ProviderFn fn);
// True when a native provider (not the reference tier) is registered.
bool OpRegistered(const OpId& op, DeviceType device);
// Runs the op on `device`; throws std::runtime_error when no provider accepts.
void RunOp(const OpId& op, DeviceType device, const OpCall& call);

ProviderStats GetProviderStats(const OpId& op, DeviceType device);
void ResetProviderStats();
// Disabled providers are skipped (not counted as declines). Throws
// std::invalid_argument for an unknown provider name.
void SetProviderEnabled(const std::string& provider_name, bool enabled);
// Counts the changes SetProviderEnabled made to the set of disabled providers: a plan
// recorded under one count replays the providers chosen then (metalrt.plan), so a
// holder of recorded plans compares it to know when to record them again.
uint64_t ProviderSelectionVersion();
// Decode rows (batch invariance): while a DecodeRowsScope(true) is alive on a thread,
// every op it runs computes each row of its inputs with the arithmetic a one-row decode
// uses: the providers whose blocking or rounding ties a row's result to the rows beside
// it (the CPU's prefill GEMMs and prefill attention, Metal's GEMMs, grouped MoE GEMMs and
// prefill attention, the chunked delta rule of "auto") decline or step aside, and the
// decode providers serve any row count. So a token gets the same bits
// in a step of one row as beside other requests' rows or as one of a speculative verify
// step's k + 1 rows (runner/engine.py sets it for steps of short chunks). A plan records
// the setting with each call and replays the call under it. Scopes nest.
class DecodeRowsScope {
 public:
  explicit DecodeRowsScope(bool on);
  ~DecodeRowsScope();
  DecodeRowsScope(const DecodeRowsScope&) = delete;
  DecodeRowsScope& operator=(const DecodeRowsScope&) = delete;

 private:
  bool previous_;
};
// The calling thread's setting (false outside every DecodeRowsScope).
bool DecodeRows();
// Sets the calling thread's setting; returns the previous one (what a scope restores).
bool SetDecodeRows(bool on);

// Provider names for (op, device) in the order they are tried.
std::vector<std::string> ListProviders(const OpId& op, DeviceType device);
// Every op name with at least one provider on any device, sorted.
std::vector<OpId> ListOps();

// One op call a provider accepted, as RunOp saw it: what a Plan (plan.h) records and
// replays. `fn` is the provider that ran; `reference` says it ran in the reference tier
// (so a replay synchronizes first, as RunOp does); `decode_rows`: DecodeRows() when it ran.
struct RecordedOp {
  OpId op;
  DeviceType device;
  OpCall call;
  std::string provider;
  ProviderFn fn = nullptr;
  bool reference = false;
  bool decode_rows = false;
};

// The work one op call encoded on a device that batches it (Metal), kept by a recording
// Plan (Backend::EndOpCapture) so that a replay encodes it again without rerunning the
// provider: no kernel names, pipeline lookups or binding lists are built again.
class EncodedOp {
 public:
  virtual ~EncodedOp() = default;
  // Encodes the kept work again for `call`, the call it was captured from. False,
  // having encoded nothing, when the dispatches no longer hold for the call's host-read
  // contents (a batch description the provider read): its provider must run again.
  virtual bool Encode(const OpCall& call) = 0;
};

// Sees every op call RunOp makes on the thread that installed it (a recording Plan).
// Before() runs before any provider and may throw to refuse the call (nothing runs);
// After() gets the call once a provider has accepted it.
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void Before(const OpId& op, DeviceType device) = 0;
  virtual void After(RecordedOp&& recorded) = 0;
};
// Installs `observer` for the calling thread (nullptr removes it); returns the previous one.
OpObserver* SetOpObserver(OpObserver* observer);
// Reruns a recorded call with the provider that served it, counted in the provider
// stats like a RunOp call (and not shown to an observer). Throws std::runtime_error if
// the provider now declines (the recording no longer matches the call).
void RunRecorded(const RecordedOp& recorded);
// Counts a recorded call whose kept work a plan encoded again, as RunRecorded counts
// its run; allocates nothing once the op's stats exist (after its recording).
void CountReplayed(const RecordedOp& recorded);

struct ProviderRegistrar {
  ProviderRegistrar(const OpId& op, DeviceType device, const char* name, int priority,
                    ProviderFn fn) {
    RegisterProvider(op, device, name, priority, fn);
  }
  ProviderRegistrar(const OpId& op, DeviceType device, ProviderTier tier, ProviderFn fn) {
    RegisterProvider(op, device, tier, fn);
  }
};

#define METALRT_CONCAT_INNER(a, b) a##b
#define METALRT_CONCAT(a, b) METALRT_CONCAT_INNER(a, b)
// Registers `fn` as provider `name` of `op` on `device` at static-init time, at a
// priority of its own (providers outside the tiers: the gates' test providers).
#define METALRT_REGISTER_PROVIDER(op, device, name, priority, fn)              \
  static ::metalrt::ProviderRegistrar METALRT_CONCAT(metalrt_provider_, __LINE__)( \
      op, device, name, priority, fn)
// Registers `fn` as the `tier` (ProviderTier::k...) provider of `op` on `device` at
// static-init time, e.g. METALRT_REGISTER_OP_PROVIDER("rms_norm", DeviceType::kCPU,
// ProviderTier::kFast, FastRmsNorm) registers "cpu_fast_rms_norm".
#define METALRT_REGISTER_OP_PROVIDER(op, device, tier, fn)                     \
  static ::metalrt::ProviderRegistrar METALRT_CONCAT(metalrt_provider_, __LINE__)( \
      op, device, ::metalrt::tier, fn)

}  // namespace metalrt
