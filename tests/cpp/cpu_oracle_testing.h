// Only the CPU oracle serves while an OracleOnly lives: the fast CPU providers, tried
// ahead of it, are switched off. For the op-case table's references and for the gates
// of an oracle's own properties (fixed accumulation order, results independent of m).
#pragma once
#include <string>
#include <vector>

#include "metalrt/op_registry.h"

namespace metalrt::testing {

class OracleOnly {
 public:
  // Every op's CPU providers but the last tried (the oracle, priority 0) are disabled.
  OracleOnly() {
    for (const OpId& op : ListOps()) Disable(op);
  }
  // The same for one op.
  explicit OracleOnly(const OpId& op) { Disable(op); }
  ~OracleOnly() {
    for (const std::string& name : disabled_) SetProviderEnabled(name, true);
  }
  OracleOnly(const OracleOnly&) = delete;
  OracleOnly& operator=(const OracleOnly&) = delete;

 private:
  void Disable(const OpId& op) {
    const std::vector<std::string> names = ListProviders(op, DeviceType::kCPU);
    for (size_t i = 0; i + 1 < names.size(); ++i) {
      SetProviderEnabled(names[i], false);
      disabled_.push_back(names[i]);
    }
  }
  std::vector<std::string> disabled_;
};

}  // namespace metalrt::testing
