#include "metalrt/errors.h"

namespace metalrt {

void Check(bool condition, const char* op, const std::string& message) {
  if (!condition) throw std::invalid_argument(std::string("[") + op + "] " + message);
}

void CheckType(bool condition, const char* op, const std::string& message) {
  if (!condition) throw TypeError(std::string("[") + op + "] " + message);
}

}  // namespace metalrt
