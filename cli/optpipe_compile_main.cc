// optpipe-compile PROFILE [-o OUT] [--method NAME] [--memory-budget SIZE] [--summary-json PATH|-]
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"Compile a pipeline-parallel training schedule from a profile", "optpipe-compile"};
  const optpipe::CommandRunner compile = optpipe::add_compile_command(app);
  return optpipe::run_cli(app, argc, argv, [&] { return compile; });
}
