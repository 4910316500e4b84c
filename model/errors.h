// Errors that reach the user. Each carries the exit code of DESIGN.md §8 and a one-line message
// that names the field or file it is about; the CLI prints it once, at the edge.
#pragma once

#include <stdexcept>
#include <string>

namespace optpipe {

enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,
  kExitBadInput = 2,
  kExitOverBudget = 3,
  kExitInvalidSchedule = 4,
};

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

// Bad input: a profile, schedule file or flag that cannot be used as given.
class InputError : public Error {
 public:
  explicit InputError(const std::string& message) : Error(kExitBadInput, message) {}
};

// An op order whose ranks wait on each other in a cycle.
class DeadlockError : public Error {
 public:
  explicit DeadlockError(const std::string& message) : Error(kExitInternal, message) {}
};

}  // namespace optpipe
