#include "metalrt/op_registry.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string_view>

namespace metalrt {
namespace {

struct Provider {
  std::string name;
  int priority;
  ProviderFn fn;
};

// (op, device) keys, found by a view of the op's name: a replayed call's stats are
// counted without building a key string.
using OpKey = std::pair<OpId, DeviceType>;
using OpKeyView = std::pair<std::string_view, DeviceType>;
struct OpKeyLess {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    const std::string_view a_op = a.first, b_op = b.first;
    return a_op != b_op ? a_op < b_op : a.second < b.second;
  }
};

struct Registry {
  std::mutex mutex;
  std::map<OpKey, std::vector<Provider>> providers;
  std::map<OpKey, ProviderStats, OpKeyLess> stats;
  std::set<std::string> disabled;
  uint64_t version = 0;   // changes of `disabled`
};

Registry& TheRegistry() {
  static Registry registry;
  return registry;
}

thread_local OpObserver* t_observer = nullptr;
// RunOp calls in progress on this thread: a provider that runs other ops runs them
// inside its own call, so an observer sees (and a plan replays) only the outermost.
thread_local int t_depth = 0;
struct Depth {
  Depth() { ++t_depth; }
  ~Depth() { --t_depth; }
};
thread_local bool t_decode_rows = false;

void CountCall(Registry& r, const OpId& op, DeviceType device, const std::string& selected,
               bool reference, uint64_t declines) {
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.stats.find(OpKeyView{op, device});
  if (it == r.stats.end()) it = r.stats.emplace(OpKey{op, device}, ProviderStats{}).first;
  ProviderStats& s = it->second;
  s.declines += declines;
  if (selected.empty()) return;
  s.last_selected = selected;
  ++s.calls;
  if (reference) ++s.reference_hits;
}

// Enabled providers of (op, device) in trial order; copied so they run unlocked.
std::vector<Provider> EnabledProviders(Registry& r, const OpId& op, DeviceType device) {
  std::vector<Provider> out;
  auto it = r.providers.find({op, device});
  if (it == r.providers.end()) return out;
  for (const Provider& p : it->second)
    if (!r.disabled.count(p.name)) out.push_back(p);
  return out;
}

}  // namespace

void RegisterProvider(const OpId& op, DeviceType device, const std::string& name, int priority,
                      ProviderFn fn) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto& list = r.providers[{op, device}];
  for (const Provider& p : list)
    if (p.name == name) throw std::logic_error("provider '" + name + "' registered twice for " + op);
  list.push_back({name, priority, fn});
  std::sort(list.begin(), list.end(), [](const Provider& a, const Provider& b) {
    return a.priority != b.priority ? a.priority > b.priority : a.name < b.name;
  });
}

std::string ProviderName(const OpId& op, DeviceType device, ProviderTier tier) {
  const bool cpu = device == DeviceType::kCPU;
  if (cpu == (tier == ProviderTier::kNative))
    throw std::logic_error("provider of " + op + ": the native tier is a GPU device's, the others the CPU's");
  const char* infix = "";
  switch (tier) {
    case ProviderTier::kFast: infix = "fast_"; break;
    case ProviderTier::kPrefill: infix = "blas_"; break;
    case ProviderTier::kPrefillBf16: infix = "bf16_"; break;
    case ProviderTier::kOracle:
    case ProviderTier::kNative: break;
  }
  return std::string(DeviceTypeName(device)) + "_" + infix + op;
}

void RegisterProvider(const OpId& op, DeviceType device, ProviderTier tier, ProviderFn fn) {
  // The tier's rank in the enum is its priority: the order ProviderTier documents.
  RegisterProvider(op, device, ProviderName(op, device, tier), static_cast<int>(tier), fn);
}

bool OpRegistered(const OpId& op, DeviceType device) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.providers.find({op, device});
  return it != r.providers.end() && !it->second.empty();
}

void RunOp(const OpId& op, DeviceType device, const OpCall& call) {
  Registry& r = TheRegistry();
  std::vector<Provider> native;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    native = EnabledProviders(r, op, device);
  }
  OpObserver* observer = t_depth == 0 ? t_observer : nullptr;
  if (observer) observer->Before(op, device);
  const Depth depth;
  uint64_t declines = 0;
  auto record = [&](const std::string& selected, bool reference) {
    CountCall(r, op, device, selected, reference, declines);
  };
  auto accepted = [&](const Provider& p, bool reference) {
    const std::string name = reference ? "reference:" + p.name : p.name;
    record(name, reference);
    if (observer) observer->After(RecordedOp{op, device, call, name, p.fn, reference, t_decode_rows});
  };
  try {
    for (const Provider& p : native) {
      if (p.fn(call)) return accepted(p, false);
      ++declines;
    }
    if (device != DeviceType::kCPU && HasBackend(device) && GetBackend(device).UnifiedMemory()) {
      std::vector<Provider> reference;
      {
        std::lock_guard<std::mutex> lock(r.mutex);
        reference = EnabledProviders(r, op, DeviceType::kCPU);
      }
      if (!reference.empty()) GetBackend(device).Synchronize();  // CPU reads device results
      for (const Provider& p : reference) {
        if (p.fn(call)) return accepted(p, true);
        ++declines;
      }
    }
  } catch (...) {
    record("", false);
    throw;
  }
  record("", false);
  throw std::runtime_error("[" + op + "] no provider on device '" + DeviceTypeName(device) +
                           "' accepted the call (" + std::to_string(declines) + " declined)");
}

OpObserver* SetOpObserver(OpObserver* observer) {
  OpObserver* previous = t_observer;
  t_observer = observer;
  return previous;
}

bool SetDecodeRows(bool on) {
  const bool previous = t_decode_rows;
  t_decode_rows = on;
  return previous;
}
DecodeRowsScope::DecodeRowsScope(bool on) : previous_(SetDecodeRows(on)) {}
DecodeRowsScope::~DecodeRowsScope() { SetDecodeRows(previous_); }
bool DecodeRows() { return t_decode_rows; }

void RunRecorded(const RecordedOp& recorded) {
  const Depth depth;   // ops the provider runs are its own, not the caller's
  const DecodeRowsScope decode_rows(recorded.decode_rows);
  if (recorded.reference) GetBackend(recorded.device).Synchronize();  // CPU reads device results
  if (!recorded.fn(recorded.call))
    throw std::runtime_error("[" + recorded.op + "] provider '" + recorded.provider +
                             "' declined a replayed call it accepted when recorded");
  CountCall(TheRegistry(), recorded.op, recorded.device, recorded.provider, recorded.reference, 0);
}

void CountReplayed(const RecordedOp& recorded) {
  CountCall(TheRegistry(), recorded.op, recorded.device, recorded.provider, recorded.reference, 0);
}

ProviderStats GetProviderStats(const OpId& op, DeviceType device) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.stats.find({op, device});
  return it == r.stats.end() ? ProviderStats{} : it->second;
}

void ResetProviderStats() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.stats.clear();
}

void SetProviderEnabled(const std::string& provider_name, bool enabled) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  bool known = false;
  for (const auto& entry : r.providers)
    for (const Provider& p : entry.second) known |= p.name == provider_name;
  if (!known) throw std::invalid_argument("unknown provider '" + provider_name + "'");
  const bool changed = enabled ? r.disabled.erase(provider_name) > 0 : r.disabled.insert(provider_name).second;
  if (changed) ++r.version;
}

uint64_t ProviderSelectionVersion() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.version;
}

std::vector<std::string> ListProviders(const OpId& op, DeviceType device) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  auto it = r.providers.find({op, device});
  if (it != r.providers.end())
    for (const Provider& p : it->second) names.push_back(p.name);
  return names;
}

std::vector<OpId> ListOps() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::set<OpId> ops;
  for (const auto& entry : r.providers) ops.insert(entry.first.first);
  return {ops.begin(), ops.end()};
}

}  // namespace metalrt
