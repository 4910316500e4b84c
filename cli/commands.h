// Subcommands of `optpipe` (and `optpipe-compile`, which is `optpipe compile`). Each registers its
// flags on a CLI11 app and returns a callback that runs it and yields the exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace optpipe {

using CommandRunner = std::function<int()>;

CommandRunner add_compile_command(CLI::App& app);
CommandRunner add_validate_command(CLI::App& app);
CommandRunner add_methods_command(CLI::App& app);
CommandRunner add_render_command(CLI::App& app);
CommandRunner add_convert_command(CLI::App& app);
CommandRunner add_frontier_command(CLI::App& app);
CommandRunner add_estimate_command(CLI::App& app);

// Accepts a finite number >= 0 (CLI11's NonNegativeNumber names the largest double in its message;
// this names the rule).
extern const CLI::Validator kFiniteNonNegative;

// Parses argv and runs the chosen command; prints errors on one line and maps them to the exit
// codes of DESIGN.md §8.
int run_cli(CLI::App& app, int argc, char** argv, const std::function<CommandRunner()>& chosen);

}  // namespace optpipe
