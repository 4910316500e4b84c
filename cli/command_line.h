// What every optpipe tool shares at its edge: flag checks, one-line error messages and the exit
// codes of docs/cli.md, which are mapped from the library's error kinds here and nowhere else.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "model/errors.h"

namespace optpipe {

enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,
  kExitBadInput = 2,
  kExitOverBudget = 3,
  kExitInvalidSchedule = 4,
  // optpipe-compile --check: the file is not what this version compiles from the profile and
  // flags, or the compile hit its time limit and cannot tell.
  kExitCheckFailed = 5,
};

// The exit code of a run that ended with an error of `kind`.
ExitCode exit_code(ErrorKind kind);

// A command, ready to run: yields its exit code.
using CommandRunner = std::function<int()>;

// Accepts a finite number >= 0 (CLI11's NonNegativeNumber names the largest double in its message;
// this names the rule).
extern const CLI::Validator kFiniteNonNegative;

// A finite number > 0 (--effort).
extern const CLI::Validator kPositive;

// The same, or inf (infinity): a limit that is no limit.
extern const CLI::Validator kNonNegativeOrInfinite;

// Refuses an empty value: an unset shell variable, not a choice.
extern const CLI::Validator kNonEmpty;

// Parses argv and runs the chosen command; prints errors on one line and maps them to exit codes.
int run_cli(CLI::App& app, int argc, char** argv, const std::function<CommandRunner()>& chosen);

}  // namespace optpipe
