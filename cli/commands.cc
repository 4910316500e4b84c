#include "cli/commands.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>

#include "cli/interrupt_watch.h"
#include "cli/runtime_host_pool.h"
#include "driver/compile_driver.h"
#include "formats/estimate.h"
#include "formats/file_io.h"
#include "formats/opsched.h"
#include "formats/profile.h"
#include "formats/schedule_json.h"
#include "formats/units.h"
#include "heuristics/registry.h"
#include "model/errors.h"
#include "model/version.h"
#include "timing/metrics.h"
#include "timing/validator.h"
#include "views/chrome_trace.h"
#include "views/export_torch_csv.h"
#include "views/render_svg.h"
#include "views/summary.h"

namespace optpipe {

namespace {

// Refuses, before anything runs, an output that would overwrite an input or another output, and
// more than one output on stdout.
void check_outputs(const std::vector<std::pair<std::string, std::string>>& inputs,
                   const std::vector<std::pair<std::string, std::string>>& outputs) {
  int to_stdout = 0;
  for (const auto& entry : outputs) to_stdout += entry.second == "-" ? 1 : 0;
  if (to_stdout > 1) {
    throw InputError("at most one output may be - (stdout): each would be mixed into the others");
  }
  check_distinct_files(inputs, outputs);
}

// --summary-json: "-" prints it on stdout (the table then goes to stderr, so stdout stays JSON).
struct SummaryOutput {
  std::string path;
  mutable bool stdout_taken = false;  // another output goes to stdout: the tables go to stderr
  bool to_stdout() const { return path == "-"; }
  std::ostream& table_stream() const { return to_stdout() || stdout_taken ? std::cerr : std::cout; }
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
                 "Write the summary as JSON to PATH, or to stdout with '-'")
      ->check(kNonEmpty);
}

void add_budget_option(CLI::App& app, std::string& budget) {
  app.add_option("--memory-budget", budget,
                 "Per-rank memory budget overriding the profile's, e.g. 60GiB or 64000000000")
      ->check(kNonEmpty);
}

std::string default_output_path(const std::string& profile_path, const std::string& format) {
  return std::filesystem::path(profile_path).stem().string() +
         (format == "bin" ? ".opsched" : ".schedule.json");
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
  double time_limit_seconds = 60;
  double effort = 1;
  double gap = 0;
  int threads = 0;
  bool verbose = false;
  std::string torch_csv;  // --export-torch-csv
  std::string torch_dialect = "2.6";
  std::string trace;  // --trace
  std::string format = "json";
  std::string cache_dir;
  std::string check;  // --check: compare with this file instead of writing one
};

// The schedule file's bytes in the chosen --format.
std::string schedule_bytes(const CompileArgs& args, const Problem& problem,
                           const Schedule& schedule, const Metrics& metrics,
                           const SolverStats* solver) {
  if (args.format == "bin") return encode_opsched(problem, schedule);
  return schedule_to_json(problem, schedule, metrics, solver).dump(1) + "\n";
}

// The schedule in the chosen --format: optpipe.schedule/v1 JSON or the binary .opsched.
void write_schedule(const CompileArgs& args, const std::string& path, const Problem& problem,
                    const Schedule& schedule, const Metrics& metrics, const SolverStats* solver) {
  write_file_atomically(path, schedule_bytes(args, problem, schedule, metrics, solver));
}

// --export-torch-csv and --trace (docs/exports.md).
void write_exports(const CompileArgs& args, const Problem& problem, const Candidate& best,
                   TorchDialect dialect, std::ostream& out) {
  if (!args.torch_csv.empty()) {
    write_file_atomically(args.torch_csv, export_torch_csv(problem, best.schedule, dialect));
    if (!args.quiet) out << "PyTorch CSV written to " << args.torch_csv << "\n";
  }
  if (!args.trace.empty()) {
    write_file_atomically(args.trace, chrome_trace_json(problem, best.schedule, best.metrics));
    if (!args.quiet) out << "trace written to " << args.trace << "\n";
  }
}

// Online incumbents: every better schedule replaces the output file atomically as soon as it is
// found, so a trainer watching the file can swap it in, and an interrupted run leaves the best.
CompileOptions compile_options(const CompileArgs& args, const Problem& problem,
                               const std::string& output, const InterruptWatch& interrupts) {
  CompileOptions options;
  options.method = args.method;
  // inf: a century, which no deadline arithmetic overflows on.
  options.optimizer.time_limit_seconds =
      std::isinf(args.time_limit_seconds) ? 100 * 365.25 * 86400 : args.time_limit_seconds;
  options.optimizer.effort = args.effort;
  options.optimizer.target_gap = args.gap;
  options.optimizer.threads = args.threads;
  options.optimizer.verbose = args.verbose;
  options.optimizer.interrupted = [&interrupts] { return interrupts.signal() != 0; };
  options.cache_dir = args.cache_dir;
  const auto started = std::chrono::steady_clock::now();
  auto seconds = [started] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  options.on_improvement = [&args, &problem, output, seconds](const Schedule& schedule,
                                                              const Metrics& reported) {
    // Each incumbent replaces a file; on stdout only the final schedule goes out; with --check
    // nothing is written.
    if (output != "-" && args.check.empty()) {
      write_schedule(args, output, problem, schedule, reported, nullptr);
    }
    if (args.quiet) return;
    args.summary.table_stream() << fmt::format(
        "[{:7.2f}s] {:<18} makespan {:.3f} {}  bound {:.3f} ({})  gap {:.2f}%\n", seconds(),
        schedule.method, reported.makespan, to_string(problem.time_unit), reported.lower_bound,
        to_string(reported.lower_bound_source), 100 * reported.gap);
  };
  // A long search without better schedules still says where it is.
  options.optimizer.on_progress = [&args, &problem, seconds](const SearchProgress& progress) {
    if (args.quiet) return;
    args.summary.table_stream() << fmt::format(
        "[{:7.2f}s] searching          best     {:.3f} {}  bound {:.3f}  gap {:.2f}%\n", seconds(),
        progress.makespan, to_string(problem.time_unit), progress.bound,
        100 * (progress.makespan / progress.bound - 1));
  };
  return options;
}

// --check: whether the file holds the bytes this compile would write. Only a compile that the
// time limit or an interrupt cut short can differ from run to run; it cannot tell, and says so.
int check_compiled(const CompileArgs& args, const Problem& problem, const CompileResult& result,
                   const InterruptWatch& interrupts) {
  const Candidate& best = result.best;
  const SolverStats* solver = result.solver ? &*result.solver : nullptr;
  if (interrupts.signal()) return interrupts.exit_code(kExitCheckFailed);
  if (result.cut_short) {
    std::cerr << fmt::format(
        "--check {}: cannot tell: the time limit stopped the compile before its work was done, "
        "so its result depends on this machine's speed; raise --time-limit (or lower --effort)\n",
        args.check);
    return kExitCheckFailed;
  }
  const std::string expected = schedule_bytes(args, problem, best.schedule, best.metrics, solver);
  const std::string found = read_text_file(args.check);
  if (found == expected) {
    if (!args.quiet) {
      args.summary.table_stream() << fmt::format(
          "{}: up to date: optpipe {} compiles the same {} bytes from {}\n", args.check,
          optpipe_version(), expected.size(), args.profile);
    }
    args.summary.write(summary_json(problem, best.method, best.metrics, solver));
    return kExitOk;
  }
  std::cerr << fmt::format(
      "--check {}: stale: optpipe {} compiles another schedule from {} with these flags ({}, "
      "makespan {:.3f} {}); recompile it with the same flags and -o {}\n",
      args.check, optpipe_version(), args.profile, best.method, best.metrics.makespan,
      to_string(problem.time_unit), args.check);
  return kExitCheckFailed;
}

int run_compile(const CompileArgs& args) {
  const InterruptWatch interrupts([&args](int signal) {
    if (args.quiet) return;
    args.summary.table_stream() << fmt::format(
        "{}: the search stops and writes the best schedule so far (again to quit at once)\n",
        signal == SIGINT ? "SIGINT" : "SIGTERM");
  });
  Problem problem = load_profile(args.profile);
  if (!args.budget.empty()) override_budget(problem, args.budget);
  const TorchDialect dialect = parse_torch_dialect(args.torch_dialect);
  // Before a long compile, what would fail only after it.
  if (!args.torch_csv.empty()) check_torch_dialect(problem, dialect);
  const std::string output = !args.check.empty() ? ""
                             : args.output.empty()
                                 ? default_output_path(args.profile, args.format)
                                 : args.output;
  check_outputs({{"profile", args.profile}, {"--check", args.check}}, {{"-o", output},
                                              {"--summary-json", args.summary.path},
                                              {"--trace", args.trace},
                                              {"--export-torch-csv", args.torch_csv}});
  for (const std::string& path : {output, args.trace, args.summary.path, args.torch_csv}) {
    if (!path.empty() && path != "-") check_writable(path);
  }
  args.summary.stdout_taken = output == "-" || args.trace == "-" || args.torch_csv == "-";
  if (interrupts.signal()) {  // while the profile was read: nothing to keep yet
    std::cerr << "interrupted before the compile began: no schedule written\n";
    return interrupts.exit_code(kExitOk);
  }
  const CompileResult result = compile(problem, compile_options(args, problem, output, interrupts));
  for (const std::string& warning : result.warnings) std::cerr << "warning: " << warning << "\n";
  if (result.status == CompileStatus::kOverBudget) {
    throw Error(ErrorKind::kOverBudget, result.over_budget_message);
  }
  const Candidate& best = result.best;
  const SolverStats* solver = result.solver ? &*result.solver : nullptr;
  if (!args.check.empty()) return check_compiled(args, problem, result, interrupts);
  write_schedule(args, output, problem, best.schedule, best.metrics, solver);
  if (!args.quiet) {
    std::ostream& out = args.summary.table_stream();
    out << summary_table(problem, best.method, best.metrics);
    if (solver) out << solver_line(*solver);
    if (result.ranking.size() > 1) out << ranking_table(result, to_string(problem.time_unit));
    out << "schedule written to " << (output == "-" ? "stdout" : output) << "\n";
  }
  write_exports(args, problem, best, dialect, args.summary.table_stream());
  args.summary.write(summary_json(problem, best.method, best.metrics, solver));
  return interrupts.exit_code(kExitOk);
}

struct ValidateArgs {
  std::string profile;
  std::string schedule;
  std::string budget;
  SummaryOutput summary;
};

int run_validate(const ValidateArgs& args) {
  check_outputs({{"profile", args.profile}, {"schedule", args.schedule}},
                {{"--summary-json", args.summary.path}});
  Problem problem = load_profile(args.profile);
  if (!args.budget.empty()) override_budget(problem, args.budget);
  const ScheduleFile file = load_valid_schedule(problem, args.profile, args.schedule);
  const std::vector<int64_t> pools = runtime_host_pool_bytes(problem, file.schedule);
  const Metrics metrics = compute_metrics(problem, file.schedule);
  args.summary.table_stream() << args.schedule << ": valid\n"
                              << summary_table(problem, file.schedule.method, metrics);
  if (std::any_of(pools.begin(), pools.end(), [](int64_t bytes) { return bytes > 0; })) {
    args.summary.table_stream() << "host pool per rank (the runtime's, in its issue order):";
    for (const int64_t bytes : pools) args.summary.table_stream() << ' ' << bytes;
    args.summary.table_stream() << " bytes\n";
  }
  args.summary.write(summary_json(problem, file.schedule.method, metrics));
  return kExitOk;
}

struct RenderArgs {
  std::string profile;
  std::string schedule;
  std::string output;
  std::string budget;
};

int run_render(const RenderArgs& args) {
  check_outputs({{"profile", args.profile}, {"schedule", args.schedule}}, {{"-o", args.output}});
  Problem problem = load_profile(args.profile);
  if (!args.budget.empty()) override_budget(problem, args.budget);
  // Over budget is worth a picture (the curve crosses the line); anything else invalid is not.
  Problem unlimited = problem;
  unlimited.budget_bytes.assign(problem.ranks, std::numeric_limits<int64_t>::max());
  const ScheduleFile file =
      load_valid_schedule(unlimited, args.profile, args.schedule, /*check_budget=*/false);
  const std::string output = args.output.empty()
                                 ? std::filesystem::path(args.schedule).stem().string() + ".svg"
                                 : args.output;
  const std::string extension = std::filesystem::path(output).extension().string();
  const Metrics metrics = compute_metrics(problem, file.schedule);
  if (extension == ".html" || extension == ".htm") {
    write_file_atomically(output, render_html(problem, file.schedule, metrics));
  } else if (extension == ".svg") {
    write_file_atomically(output, render_svg(problem, file.schedule, metrics));
  } else {
    throw InputError(fmt::format("-o {}: must end in .svg or .html", output));
  }
  std::cout << "timeline written to " << output << "\n";
  return kExitOk;
}

}  // namespace

CommandRunner add_compile_command(CLI::App& app) {
  auto args = std::make_shared<CompileArgs>();
  app.add_option("profile", args->profile, "Profile (optpipe.profile/v1 JSON)")->required();
  app.add_option("-o,--output", args->output,
                 "Schedule file to write (default: <profile name>.schedule.json)")
      ->check(kNonEmpty);
  app.add_option("--method", args->method,
                 "auto (default: best generator, then the optimiser), milp, or a method from "
                 "`optpipe methods`");
  add_budget_option(app, args->budget);
  add_summary_option(app, args->summary);
  app.add_option("--effort", args->effort,
                 "The optimiser's work (auto, milp): 1 (default) takes a few seconds at 8 ranks "
                 "and 32 microbatches; 2 does twice the work. The same profile and flags give "
                 "the same schedule on any machine unless --time-limit comes first")
      ->check(kPositive)
      ->check(CLI::Validator(
          [](std::string& input) -> std::string {
            if (std::stod(input) <= kMaxEffort) return "";
            return fmt::format("must be at most {:.0f} (a million times the default work), got {}",
                               kMaxEffort, input);
          },
          "at most 1e6"));
  app.add_option("--time-limit", args->time_limit_seconds,
                 "Safety cap in seconds on the whole compile (default 60, 0 skips the optimiser, "
                 "inf: none); reaching it makes the result depend on the machine")
      ->check(kNonNegativeOrInfinite);
  app.add_option("--gap", args->gap,
                 "Stop the optimiser once the makespan is within this fraction of the lower "
                 "bound, e.g. 0.01 for 1% (default 0: at the time limit or a proven optimum)")
      ->check(kFiniteNonNegative);
  app.add_option("--threads", args->threads,
                 "Optimiser threads for the list policies and the local search (default 0: "
                 "serial); the schedule does not depend on them")
      ->check(CLI::Range(0, 256));
  app.add_flag("--verbose", args->verbose, "Show CBC's log");
  app.add_option("--check", args->check,
                 "Compile, and instead of writing the schedule compare it with this file: exit 0 "
                 "when it is byte for byte what this version compiles from the profile and flags, "
                 "5 when not (for CI; docs/cli.md)")
      ->check(kNonEmpty)
      ->excludes("-o");
  app.add_option("--cache", args->cache_dir,
                 "Directory of compiled schedules: reuse the one stored for this problem and "
                 "budget, store the result")
      ->check(kNonEmpty);
  app.add_option("--format", args->format,
                 "Schedule file format: json (optpipe.schedule/v1, default) or bin (.opsched, "
                 "for the runtime shim)")
      ->check(CLI::IsMember({"json", "bin"}));
  app.add_flag("-q,--quiet", args->quiet, "Print nothing but errors");
  app.add_option("--export-torch-csv", args->torch_csv,
                 "Also write the schedule as a PyTorch pipelining compute-only CSV")
      ->check(kNonEmpty);
  app.add_option("--torch-dialect", args->torch_dialect,
                 "Token set of that CSV: 2.6 (default; 2.6 and later) or 2.5");
  app.add_option("--trace", args->trace,
                 "Also write a Chrome trace (JSON) for Perfetto or chrome://tracing")
      ->check(kNonEmpty);
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

CommandRunner add_render_command(CLI::App& app) {
  auto args = std::make_shared<RenderArgs>();
  app.add_option("profile", args->profile, "Profile the schedule was compiled for")->required();
  app.add_option("schedule", args->schedule, "Schedule (optpipe.schedule/v1 JSON)")->required();
  app.add_option("-o,--output", args->output,
                 "timeline.svg or timeline.html (default: <schedule name>.svg)")
      ->check(kNonEmpty);
  add_budget_option(app, args->budget);
  return [args] { return run_render(*args); };
}

struct ConvertArgs {
  std::string profile;
  std::string schedule;
  std::string output;
  std::string budget;
};

CommandRunner add_convert_command(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  app.add_option("profile", args->profile, "Profile the schedule was compiled for")->required();
  app.add_option("schedule", args->schedule, "Schedule (optpipe.schedule/v1 JSON)")->required();
  app.add_option("output", args->output, "Binary schedule to write (.opsched)")
      ->required()
      ->check(kNonEmpty);
  add_budget_option(app, args->budget);
  return [args] {
    check_outputs({{"profile", args->profile}, {"schedule", args->schedule}},
                  {{"output", args->output}});
    Problem problem = load_profile(args->profile);
    if (!args->budget.empty()) override_budget(problem, args->budget);
    const ScheduleFile file = load_valid_schedule(problem, args->profile, args->schedule);
    write_opsched(args->output, problem, file.schedule);
    if (args->output != "-") std::cout << args->output << " written\n";
    return kExitOk;
  };
}

struct FrontierArgs {
  std::string profile;
  int points = 8;
  bool csv = false;
};

CommandRunner add_frontier_command(CLI::App& app) {
  auto args = std::make_shared<FrontierArgs>();
  app.add_option("profile", args->profile, "Profile (optpipe.profile/v1 JSON)")->required();
  app.add_option("--points", args->points, "Budgets to try (default 8)")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--csv", args->csv, "Print CSV instead of a table");
  return [args] {
    const Problem problem = load_profile(args->profile);
    const std::vector<FrontierPoint> frontier = memory_frontier(problem, args->points);
    if (frontier.empty()) {
      throw Error(ErrorKind::kOverBudget,
                  fmt::format("{}: no budget fits any method", args->profile));
    }
    const char* unit = to_string(problem.time_unit);
    std::cout << (args->csv ? fmt::format("budget_bytes,method,makespan_{}\n", unit)
                            : fmt::format("{:>14} {:>12}  {:<18} {:>14}\n", "budget", "bytes",
                                          "method", fmt::format("makespan {}", unit)));
    for (const FrontierPoint& p : frontier) {
      std::cout << (args->csv ? fmt::format("{},{},{}\n", p.budget_bytes, p.method, p.makespan)
                              : fmt::format("{:>14} {:>12}  {:<18} {:>14.3f}\n",
                                            format_bytes_short(p.budget_bytes), p.budget_bytes,
                                            p.method, p.makespan));
    }
    return kExitOk;
  };
}

struct EstimateArgs {
  std::string model;
  std::string output;
  std::string setup;
  EstimateOverrides overrides;
};

CommandRunner add_estimate_command(CLI::App& app) {
  auto args = std::make_shared<EstimateArgs>();
  EstimateOverrides& flags = args->overrides;
  app.add_option("model", args->model,
                 "Model description (optpipe.model/v1) or a Hugging Face config.json "
                 "(llama, mistral, qwen2, gpt2); docs/estimate.md")
      ->required();
  app.add_option("-o,--output", args->output,
                 "Profile to write (default: <model file name>.profile.json; '-': stdout)")
      ->check(kNonEmpty);
  app.add_option("--setup", args->setup,
                 "optpipe.model/v1 file without its model section (name, training, pipeline, "
                 "hardware), laid over the model's fields; what a config.json does not give")
      ->check(kNonEmpty);
  app.add_option("--ranks", flags.ranks, "pipeline.ranks: pipeline ranks (GPUs)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app.add_option("--microbatches", flags.microbatches,
                 "pipeline.microbatches: microbatches per iteration")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  app.add_option("--seq-length", flags.seq_length, "training.seq_length: tokens per sequence")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--chunks-per-rank", flags.chunks_per_rank,
                 "pipeline.chunks_per_rank: stages per rank")
      ->check(CLI::Range(int64_t{1}, int64_t{64}));
  app.add_option("--placement", flags.placement, "pipeline.placement: loop or vshape")
      ->check(CLI::IsMember({"loop", "vshape"}));
  app.add_option("--gpu-peak-tflops", flags.gpu_peak_tflops,
                 "hardware.gpu_peak_tflops: dense peak TFLOP/s in the training dtype")
      ->check(kPositive);
  app.add_option("--gpu-memory", flags.gpu_memory, "hardware.gpu_memory: e.g. 80GiB")
      ->check(kNonEmpty);
  return [args] {
    check_outputs({{"model", args->model}, {"--setup", args->setup}}, {{"-o", args->output}});
    const ModelDescription model = load_model_inputs(args->model, args->setup, args->overrides);
    const nlohmann::ordered_json profile = estimate_profile(model);
    if (args->output == "-") {
      std::cout << profile.dump(2) << "\n";
      return kExitOk;
    }
    const std::string output =
        args->output.empty() ? std::filesystem::path(args->model).stem().string() + ".profile.json"
                             : args->output;
    write_file_atomically(output, profile.dump(2) + "\n");
    std::cout << estimate_summary(model, profile) << "profile written to " << output << "\n";
    return kExitOk;
  };
}

CommandRunner add_methods_command(CLI::App&) {
  return [] {
    for (const Generator& g : generators()) {
      std::cout << fmt::format("{:<18} {}\n{:<18} ({})\n", g.name, g.summary, "", g.reference);
    }
    std::cout << fmt::format("{:<18} {}\n", "milp",
                             "the MILP optimiser (CBC) seeded with the best method: proves small "
                             "problems optimal, re-optimises windows of larger ones");
    std::cout << fmt::format("{:<18} {}\n", "auto",
                             "every method that supports the profile, then the optimiser on the "
                             "fastest schedule that fits the budget (the default)");
    return kExitOk;
  };
}

}  // namespace optpipe
