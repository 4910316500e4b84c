// Errors that reach the user. Each says what kind of failure it is and carries a one-line message
// that names the field or file it is about; the command line prints it once, at the edge, and
// turns its kind into an exit code there (cli/command_line.h).
#pragma once

#include <stdexcept>
#include <string>

namespace optpipe {

enum class ErrorKind {
  kInternal,         // a bug in optpipe: what the code relies on does not hold
  kBadInput,         // a profile, schedule file or flag that cannot be used as given
  kOverBudget,       // no schedule fits the memory budget
  kInvalidSchedule,  // a schedule file that the validator rejects or that is another profile's
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Bad input: a profile, schedule file or flag that cannot be used as given.
class InputError : public Error {
 public:
  explicit InputError(const std::string& message) : Error(ErrorKind::kBadInput, message) {}
};

// An op order whose ranks wait on each other in a cycle.
class DeadlockError : public Error {
 public:
  explicit DeadlockError(const std::string& message) : Error(ErrorKind::kInternal, message) {}
};

}  // namespace optpipe
