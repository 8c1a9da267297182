// Exception types. Python sees TypeError for TypeError, ValueError for
// std::invalid_argument, RuntimeError for std::runtime_error.
#pragma once
#include <stdexcept>
#include <string>

namespace metalrt {

// A wrong dtype or a wrong kind of argument.
class TypeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws std::invalid_argument("[op] message") when `condition` is false.
void Check(bool condition, const char* op, const std::string& message);
// Throws TypeError("[op] message") when `condition` is false.
void CheckType(bool condition, const char* op, const std::string& message);

// What Check and CheckType throw, unconditionally: for `if (!ok) Fail(op, ...)`, which
// builds the message only when the check fails (Check's argument is built on every
// call, and the checks run on every op of a decode step).
[[noreturn]] void Fail(const char* op, const std::string& message);
[[noreturn]] void FailType(const char* op, const std::string& message);

}  // namespace metalrt
