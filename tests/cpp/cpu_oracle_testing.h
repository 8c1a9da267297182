// For the gates of a CPU oracle's own properties (fixed accumulation order, results
// independent of blocking): the fast CPU providers registered ahead of the oracle are
// switched off for a scope, so the oracle serves every call whatever m is.
#pragma once
#include <string>
#include <vector>

#include "metalrt/op_registry.h"

namespace metalrt::testing {

class OracleOnly {
 public:
  // Disables every CPU provider of `op` other than `oracle` until destruction.
  OracleOnly(const OpId& op, const std::string& oracle) {
    for (const std::string& name : ListProviders(op, DeviceType::kCPU))
      if (name != oracle) {
        SetProviderEnabled(name, false);
        disabled_.push_back(name);
      }
  }
  ~OracleOnly() {
    for (const std::string& name : disabled_) SetProviderEnabled(name, true);
  }
  OracleOnly(const OracleOnly&) = delete;
  OracleOnly& operator=(const OracleOnly&) = delete;

 private:
  std::vector<std::string> disabled_;
};

}  // namespace metalrt::testing
