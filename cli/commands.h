// Subcommands of `optpipe` (and `optpipe-compile`, which is `optpipe compile`). Each registers its
// flags on a CLI11 app and returns a callback that runs it and yields the exit code.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/command_line.h"

namespace optpipe {

CommandRunner add_compile_command(CLI::App& app);
CommandRunner add_validate_command(CLI::App& app);
CommandRunner add_methods_command(CLI::App& app);
CommandRunner add_render_command(CLI::App& app);
CommandRunner add_convert_command(CLI::App& app);
CommandRunner add_frontier_command(CLI::App& app);
CommandRunner add_estimate_command(CLI::App& app);

}  // namespace optpipe
