#include "cli/command_line.h"

#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <string>

#include "model/version.h"

namespace optpipe {

const CLI::Validator kFiniteNonNegative(
    [](std::string& input) -> std::string {
      double value = -1;
      size_t used = 0;
      try {
        value = std::stod(input, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == input.size() && std::isfinite(value) && value >= 0) return "";
      return fmt::format("must be a number >= 0, got {}", input);
    },
    "NUMBER >= 0");

const CLI::Validator kPositive(
    [](std::string& input) -> std::string {
      if (kFiniteNonNegative(input).empty() && std::stod(input) > 0) return "";
      return fmt::format("must be a number > 0, got {}", input);
    },
    "NUMBER > 0");

ExitCode exit_code(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInternal:
      return kExitInternal;
    case ErrorKind::kBadInput:
      return kExitBadInput;
    case ErrorKind::kOverBudget:
      return kExitOverBudget;
    case ErrorKind::kInvalidSchedule:
      return kExitInvalidSchedule;
  }
  return kExitInternal;
}

const CLI::Validator kNonNegativeOrInfinite(
    [](std::string& input) -> std::string {
      if (input == "inf" || input == "infinity") return "";
      return kFiniteNonNegative(input).empty()
                 ? ""
                 : fmt::format("must be a number >= 0 or inf, got {}", input);
    },
    "NUMBER >= 0 or inf");

const CLI::Validator kNonEmpty(
    [](std::string& input) -> std::string {
      return input.empty() ? "must not be empty (an unset shell variable?)" : "";
    },
    "");

int run_cli(CLI::App& app, int argc, char** argv, const std::function<CommandRunner()>& chosen) {
  app.set_version_flag("--version", std::string(app.get_name()) + " " + optpipe_version());
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << app.get_name() << ": error: " << e.what() << " (see --help)\n";
    return kExitBadInput;
  }
  try {
    return chosen()();
  } catch (const Error& e) {
    std::cerr << app.get_name() << ": error: " << e.what() << "\n";
    return exit_code(e.kind());
  } catch (const std::exception& e) {
    std::cerr << app.get_name() << ": internal error: " << e.what() << "\n";
    return kExitInternal;
  }
}

}  // namespace optpipe
