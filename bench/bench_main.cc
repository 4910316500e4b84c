// optpipe-bench: the benchmark harness (docs/benchmarks.md). Compiles every case of the suite with
// every generator and the optimiser; progress on stderr, markdown tables on stdout, JSON results
// and one memory-vs-makespan SVG per profile under --out. Not a test: not in ctest.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <thread>

#include "bench/measure.h"
#include "bench/plot_svg.h"
#include "bench/report.h"
#include "bench/suite.h"
#include "cli/command_line.h"
#include "formats/file_io.h"
#include "model/errors.h"

namespace {

using namespace optpipe::bench;

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

// The flags, as parsed.
struct BenchFlags {
  std::string suite = "quick";
  std::string out_dir = "bench-results";
  std::vector<double> milp_efforts;
  double time_cap_seconds = 600;
  int threads = 2;
  uint64_t search_seed = optpipe::OptimizerOptions{}.search_seed;
  std::string only;
  std::vector<double> budgets;
};

void add_bench_flags(CLI::App& app, BenchFlags& flags) {
  app.add_option("--suite", flags.suite, "quick (R 4, 8; minutes) or full (R up to 32; hours)")
      ->check(CLI::IsMember({"quick", "full"}));
  app.add_option("--out", flags.out_dir, "folder for results.json and the SVG plots");
  app.add_option("--milp-effort", flags.milp_efforts,
                 "optimiser --effort values, overriding the suite's (quick: 0.25; full: 1 4); 0: "
                 "no optimiser")
      ->delimiter(',')
      ->check(optpipe::kFiniteNonNegative);
  app.add_option("--time-cap", flags.time_cap_seconds,
                 "the optimiser's safety cap in seconds (default 600); a run it stops is marked "
                 "not reproducible")
      ->check(optpipe::kFiniteNonNegative);
  app.add_option("--threads", flags.threads, "optimiser threads")->check(CLI::Range(1, 256));
  app.add_option("--search-seed", flags.search_seed,
                 "seed of the optimiser's local search; runs with several seeds tell a change "
                 "from the spread of one run")
      ->check(optpipe::kFiniteNonNegative)  // else "-1" wraps round to 2^64 - 1
      ->capture_default_str();
  app.add_option("--only", flags.only, "run only the profiles whose name contains this text");
  app.add_option("--budgets", flags.budgets,
                 "budgets as fractions of 1F1B's activation peak, overriding the suite's "
                 "(1 0.75 0.5 0.33; recompute profiles 0.5 0.33 0.2 0.1)")
      ->delimiter(',')
      ->check(CLI::Range(0.001, 100.0));
}

int run_bench(BenchFlags flags) {
  const SuiteKind kind = flags.suite == "full" ? SuiteKind::kFull : SuiteKind::kQuick;
  std::vector<double>& milp_efforts = flags.milp_efforts;
  if (milp_efforts.empty()) {
    milp_efforts = kind == SuiteKind::kFull ? std::vector<double>{1, 4} : std::vector<double>{0.25};
  }
  std::erase_if(milp_efforts, [](double e) { return e <= 0; });
  MeasureOptions options;
  options.milp_efforts = milp_efforts;
  options.time_cap_seconds = flags.time_cap_seconds;
  options.threads = flags.threads;
  options.search_seed = flags.search_seed;

  std::vector<ProfileSpec> profiles;
  for (const ProfileSpec& p : suite_profiles(kind)) {
    if (flags.only.empty() || p.name.find(flags.only) != std::string::npos) profiles.push_back(p);
  }
  if (profiles.empty()) {
    throw optpipe::InputError(fmt::format(
        "--only: no profile of the {} suite has \"{}\" in its name (see docs/benchmarks.md)",
        flags.suite, flags.only));
  }
  size_t total = 0;
  for (const ProfileSpec& p : profiles) {
    total += flags.budgets.empty() ? budget_fractions(p).size() : flags.budgets.size();
  }
  const std::string started = utc_now();
  const auto clock_start = std::chrono::steady_clock::now();

  std::error_code error;
  std::filesystem::create_directories(flags.out_dir, error);
  if (error) {
    throw optpipe::InputError(
        fmt::format("--out: cannot create {}: {}", flags.out_dir, error.message()));
  }
  const std::filesystem::path out_dir(flags.out_dir);
  std::vector<CaseResult> results;
  for (const ProfileSpec& profile : profiles) {
    for (const BenchCase& bench_case : profile_cases(profile, flags.budgets)) {
      fmt::print(stderr, "case {}/{}: {} ...", results.size() + 1, total, bench_case.name());
      std::fflush(stderr);
      const auto start = std::chrono::steady_clock::now();
      CaseResult result = measure_case(bench_case, options);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (result.seed < 0) {
        fmt::print(stderr, " no generator fits ({:.1f} s)\n", seconds);
      } else {
        const MethodResult& seed = result.generators[result.seed];
        fmt::print(stderr, " seed {} {:.1f}", seed.label(), seed.makespan);
        for (const MethodResult& m : result.optimizer) {
          if (m.error.empty()) {
            fmt::print(stderr, ", {} {:.1f} ({})", m.label(), m.makespan, m.solver_status);
          } else {
            fmt::print(stderr, ", {} error", m.label());
          }
        }
        fmt::print(stderr, " ({:.1f} s)\n", seconds);
      }
      results.push_back(std::move(result));
    }
    optpipe::write_file_atomically((out_dir / (profile.name + ".svg")).string(),
                                   memory_makespan_svg(profile.name, results));
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_start).count();

  fmt::print(
      "## optpipe-bench, {} suite ({}, {:.0f} s wall, {} hardware threads, optimiser on "
      "{} threads, search seed {}, efforts {}, cap {} s)\n\n",
      flags.suite, started, wall, std::thread::hardware_concurrency(), flags.threads,
      flags.search_seed,
      milp_efforts.empty() ? std::string("none") : fmt::format("{}", fmt::join(milp_efforts, "/")),
      flags.time_cap_seconds);
  const std::vector<TargetTallies> targets = tally_targets(results);
  if (!targets.empty()) fmt::print("### Targets\n\n{}\n", targets_table(targets));
  fmt::print("### Per case\n\n{}\n", summary_table(results));
  fmt::print("### Per method over the suite\n\n{}\n", method_table(results));
  if (const std::string large = large_case_compile_table(results, 32, 256); !large.empty()) {
    fmt::print("### Generator compile time, R = 32, m = 256\n\n{}\n", large);
  }
  fmt::print("### Per case and method\n\n{}", detail_table(results));

  nlohmann::json cases = nlohmann::json::array();
  for (const CaseResult& c : results) cases.push_back(to_json(c));
  nlohmann::json target_tallies = nlohmann::json::array();
  for (const TargetTallies& t : targets) target_tallies.push_back(to_json(t));
  const nlohmann::json document = {{"format", "optpipe.bench/v1"},
                                   {"suite", flags.suite},
                                   {"started_utc", started},
                                   {"wall_seconds", wall},
                                   {"hardware_threads", std::thread::hardware_concurrency()},
                                   {"optimizer_threads", flags.threads},
                                   {"optimizer_search_seed", flags.search_seed},
                                   {"optimizer_efforts", milp_efforts},
                                   {"time_unit", "ms"},
                                   {"targets", target_tallies},
                                   {"cases", cases}};
  optpipe::write_file_atomically((out_dir / "results.json").string(), document.dump(2) + "\n");
  fmt::print(stderr, "wrote {}/results.json and {} SVG plots ({:.0f} s)\n", flags.out_dir,
             profiles.size(), wall);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Benchmark optpipe's generators and optimiser on a suite of GPT-style profiles",
               "optpipe-bench"};
  BenchFlags flags;
  add_bench_flags(app, flags);
  return optpipe::run_cli(app, argc, argv,
                          [&] { return optpipe::CommandRunner([&] { return run_bench(flags); }); });
}
