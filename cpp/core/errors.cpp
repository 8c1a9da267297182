#include "metalrt/errors.h"

namespace metalrt {

void Fail(const char* op, const std::string& message) {
  throw std::invalid_argument(std::string("[") + op + "] " + message);
}

void FailType(const char* op, const std::string& message) { throw TypeError(std::string("[") + op + "] " + message); }

void Check(bool condition, const char* op, const std::string& message) {
  if (!condition) Fail(op, message);
}

void CheckType(bool condition, const char* op, const std::string& message) {
  if (!condition) FailType(op, message);
}

}  // namespace metalrt
