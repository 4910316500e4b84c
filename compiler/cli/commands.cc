#include "compiler/cli/commands.h"

#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include "compiler/cli/compile_driver.h"
#include "compiler/errors.h"
#include "compiler/file_io.h"
#include "compiler/metrics.h"
#include "compiler/profile.h"
#include "compiler/report.h"
#include "compiler/schedule_json.h"
#include "compiler/validator.h"
#include "heuristics/registry.h"

namespace optpipe {

namespace {

// --summary-json: "-" prints it on stdout (the table then goes to stderr, so stdout stays JSON).
struct SummaryOutput {
  std::string path;
  bool to_stdout() const { return path == "-"; }
  std::ostream& table_stream() const { return to_stdout() ? std::cerr : std::cout; }
  void write(const nlohmann::json& summary) const {
    if (path.empty()) return;
    if (to_stdout()) {
      std::cout << summary.dump(2) << "\n";
    } else {
      write_file_atomically(path, summary.dump(2) + "\n");
    }
  }
};

void add_summary_option(CLI::App& app, SummaryOutput& summary) {
  app.add_option("--summary-json", summary.path,
                 "Write the summary as JSON to PATH, or to stdout with '-'");
}

void add_budget_option(CLI::App& app, std::string& budget) {
  app.add_option("--memory-budget", budget,
                 "Per-rank memory budget overriding the profile's, e.g. 60GiB or 64000000000");
}

std::string default_output_path(const std::string& profile_path) {
  return std::filesystem::path(profile_path).stem().string() + ".schedule.json";
}

std::string ranking_table(const CompileResult& result, const char* unit) {
  std::string out = "methods tried (best first):\n";
  for (const Candidate& c : result.ranking) {
    out += fmt::format("  {:<18} makespan {:>12.3f} {}  idle {:>5.1f}%  {}\n", c.method,
                       c.metrics.makespan, unit, 100 * c.metrics.idle_fraction,
                       c.rejection.empty() ? "fits" : "over budget");
  }
  return out;
}

struct CompileArgs {
  std::string profile;
  std::string output;
  std::string method = "auto";
  std::string budget;
  SummaryOutput summary;
  bool quiet = false;
};

int run_compile(const CompileArgs& args) {
  Problem problem = load_profile(args.profile);
  if (!args.budget.empty()) override_budget(problem, args.budget);
  const CompileResult result = compile(problem, args.method);
  const Candidate& best = result.best;
  const std::string output = args.output.empty() ? default_output_path(args.profile) : args.output;
  write_file_atomically(output,
                        schedule_to_json(problem, best.schedule, best.metrics).dump(1) + "\n");
  if (!args.quiet) {
    std::ostream& out = args.summary.table_stream();
    out << summary_table(problem, best.method, best.metrics);
    if (result.ranking.size() > 1) out << ranking_table(result, to_string(problem.time_unit));
    out << "schedule written to " << output << "\n";
  }
  args.summary.write(summary_json(problem, best.method, best.metrics));
  return kExitOk;
}

struct ValidateArgs {
  std::string profile;
  std::string schedule;
  std::string budget;
  SummaryOutput summary;
};

int run_validate(const ValidateArgs& args) {
  Problem problem = load_profile(args.profile);
  if (!args.budget.empty()) override_budget(problem, args.budget);
  const ScheduleFile file = load_schedule_json(args.schedule);
  if (file.profile_sha256 != problem.profile_sha256) {
    throw Error(kExitInvalidSchedule,
                fmt::format("{}: was compiled for another profile (sha256 {}), {} has {}; "
                            "recompile it with optpipe-compile",
                            args.schedule, file.profile_sha256.substr(0, 12), args.profile,
                            problem.profile_sha256.substr(0, 12)));
  }
  if (const auto violation = validate(problem, file.schedule)) {
    throw Error(kExitInvalidSchedule, fmt::format("{}: invalid: {}", args.schedule,
                                                  violation->message));
  }
  const Metrics metrics = compute_metrics(problem, file.schedule);
  args.summary.table_stream() << args.schedule << ": valid\n"
                              << summary_table(problem, file.schedule.method, metrics);
  args.summary.write(summary_json(problem, file.schedule.method, metrics));
  return kExitOk;
}

}  // namespace

CommandRunner add_compile_command(CLI::App& app) {
  auto args = std::make_shared<CompileArgs>();
  app.add_option("profile", args->profile, "Profile (optpipe.profile/v1 JSON)")->required();
  app.add_option("-o,--output", args->output,
                 "Schedule file to write (default: <profile name>.schedule.json)");
  app.add_option("--method", args->method,
                 "auto (default: best of all generators) or a method from `optpipe methods`");
  add_budget_option(app, args->budget);
  add_summary_option(app, args->summary);
  app.add_flag("-q,--quiet", args->quiet, "Print nothing but errors");
  return [args] { return run_compile(*args); };
}

CommandRunner add_validate_command(CLI::App& app) {
  auto args = std::make_shared<ValidateArgs>();
  app.add_option("profile", args->profile, "Profile the schedule was compiled for")->required();
  app.add_option("schedule", args->schedule, "Schedule (optpipe.schedule/v1 JSON)")->required();
  add_budget_option(app, args->budget);
  add_summary_option(app, args->summary);
  return [args] { return run_validate(*args); };
}

CommandRunner add_methods_command(CLI::App&) {
  return [] {
    for (const Generator& g : generators()) {
      std::cout << fmt::format("{:<18} {}\n{:<18} ({})\n", g.name, g.summary, "", g.reference);
    }
    std::cout << fmt::format("{:<18} {}\n", "auto",
                             "runs every method that supports the profile and keeps the fastest "
                             "schedule that fits the budget (the default)");
    return kExitOk;
  };
}

int run_cli(CLI::App& app, int argc, char** argv, const std::function<CommandRunner()>& chosen) {
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
    return e.code();
  } catch (const std::exception& e) {
    std::cerr << app.get_name() << ": internal error: " << e.what() << "\n";
    return kExitInternal;
  }
}

}  // namespace optpipe
