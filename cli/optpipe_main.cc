// optpipe <compile|validate|render|convert|frontier|estimate|methods> ...
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"optpipe: compiler of pipeline-parallel training schedules", "optpipe"};
  app.require_subcommand(1);
  CLI::App* compile = app.add_subcommand("compile", "Compile a schedule (same as optpipe-compile)");
  CLI::App* validate = app.add_subcommand("validate", "Check a schedule file against a profile");
  CLI::App* render = app.add_subcommand("render", "Draw a schedule's timeline as SVG or HTML");
  CLI::App* convert =
      app.add_subcommand("convert", "Turn a schedule JSON into the binary .opsched of the shim");
  CLI::App* frontier =
      app.add_subcommand("frontier", "Memory/makespan trade-off: the best method per budget");
  CLI::App* estimate =
      app.add_subcommand("estimate", "Estimate a profile from a model description");
  CLI::App* methods = app.add_subcommand("methods", "List the scheduling methods");
  const optpipe::CommandRunner run_compile = optpipe::add_compile_command(*compile);
  const optpipe::CommandRunner run_validate = optpipe::add_validate_command(*validate);
  const optpipe::CommandRunner run_render = optpipe::add_render_command(*render);
  const optpipe::CommandRunner run_convert = optpipe::add_convert_command(*convert);
  const optpipe::CommandRunner run_frontier = optpipe::add_frontier_command(*frontier);
  const optpipe::CommandRunner run_estimate = optpipe::add_estimate_command(*estimate);
  const optpipe::CommandRunner run_methods = optpipe::add_methods_command(*methods);
  return optpipe::run_cli(app, argc, argv, [&] {
    if (compile->parsed()) return run_compile;
    if (validate->parsed()) return run_validate;
    if (render->parsed()) return run_render;
    if (convert->parsed()) return run_convert;
    if (frontier->parsed()) return run_frontier;
    if (estimate->parsed()) return run_estimate;
    return run_methods;
  });
}
