#include "core/env.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace metalrt {

long PositiveIntFromEnv(const char* name, long fallback, long max) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return fallback;
  char* end = nullptr;
  const long value = std::strtol(env, &end, 10);
  if (*end != '\0' || value < 1 || value > max)
    throw std::invalid_argument(std::string(name) + " must be an integer in [1, " + std::to_string(max) +
                                "], got '" + env + "'");
  return value;
}

}  // namespace metalrt
