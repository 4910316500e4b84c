// optpipe-bench: the benchmark harness (docs/benchmarks.md). Compiles every case of the suite with
// every generator and the optimiser; progress on stderr, markdown tables on stdout, JSON results
// and one memory-vs-makespan SVG per profile under --out. Not a test: not in ctest.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "bench/measure.h"
#include "bench/plot_svg.h"
#include "bench/report.h"
#include "bench/suite.h"

namespace {

using namespace optpipe::bench;

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error(fmt::format("cannot write {}", path.string()));
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Benchmark optpipe's generators and optimiser on a suite of GPT-style profiles",
               "optpipe-bench"};
  std::string suite = "quick";
  std::string out_dir = "bench-results";
  std::vector<double> milp_seconds;
  int threads = 2;
  std::string only;
  app.add_option("--suite", suite, "quick (R 4, 8; minutes) or full (R up to 32; hours)")
      ->check(CLI::IsMember({"quick", "full"}));
  app.add_option("--out", out_dir, "folder for results.json and the SVG plots");
  app.add_option("--milp-seconds", milp_seconds,
                 "optimiser time limits, overriding the suite's (quick: 2; full: 10 60); 0: none")
      ->delimiter(',');
  app.add_option("--threads", threads, "optimiser threads")->check(CLI::PositiveNumber);
  app.add_option("--only", only, "run only the profiles whose name contains this text");
  std::vector<double> budgets;
  app.add_option("--budgets", budgets,
                 "budgets as fractions of 1F1B's activation peak, overriding the suite's "
                 "(1 0.75 0.5 0.33; recompute profiles 0.5 0.33 0.2 0.1)")
      ->delimiter(',')
      ->check(CLI::Range(0.001, 100.0));
  CLI11_PARSE(app, argc, argv);

  const SuiteKind kind = suite == "full" ? SuiteKind::kFull : SuiteKind::kQuick;
  if (milp_seconds.empty()) {
    milp_seconds = kind == SuiteKind::kFull ? std::vector<double>{10, 60} : std::vector<double>{2};
  }
  std::erase_if(milp_seconds, [](double s) { return s <= 0; });
  MeasureOptions options;
  options.milp_time_limits = milp_seconds;
  options.threads = threads;

  std::vector<ProfileSpec> profiles;
  for (const ProfileSpec& p : suite_profiles(kind)) {
    if (only.empty() || p.name.find(only) != std::string::npos) profiles.push_back(p);
  }
  size_t total = 0;
  for (const ProfileSpec& p : profiles) {
    total += budgets.empty() ? budget_fractions(p).size() : budgets.size();
  }
  const std::string started = utc_now();
  const auto clock_start = std::chrono::steady_clock::now();

  try {
    std::filesystem::create_directories(out_dir);
    std::vector<CaseResult> results;
    for (const ProfileSpec& profile : profiles) {
      for (const BenchCase& bench_case : profile_cases(profile, budgets)) {
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
      write_file(std::filesystem::path(out_dir) / (profile.name + ".svg"),
                 memory_makespan_svg(profile.name, results));
    }
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_start).count();

    fmt::print(
        "## optpipe-bench, {} suite ({}, {:.0f} s wall, {} hardware threads, optimiser on "
        "{} threads, time limits {} s)\n\n",
        suite, started, wall, std::thread::hardware_concurrency(), threads,
        milp_seconds.empty() ? std::string("none")
                             : fmt::format("{}", fmt::join(milp_seconds, "/")));
    fmt::print("### Per case\n\n{}\n", summary_table(results));
    fmt::print("### Per method over the suite\n\n{}\n", method_table(results));
    if (const std::string large = large_case_compile_table(results, 32, 256); !large.empty()) {
      fmt::print("### Generator compile time, R = 32, m = 256\n\n{}\n", large);
    }
    fmt::print("### Per case and method\n\n{}", detail_table(results));

    nlohmann::json cases = nlohmann::json::array();
    for (const CaseResult& c : results) cases.push_back(to_json(c));
    const nlohmann::json document = {{"format", "optpipe.bench/v1"},
                                     {"suite", suite},
                                     {"started_utc", started},
                                     {"wall_seconds", wall},
                                     {"hardware_threads", std::thread::hardware_concurrency()},
                                     {"optimizer_threads", threads},
                                     {"optimizer_time_limits_seconds", milp_seconds},
                                     {"time_unit", "ms"},
                                     {"cases", cases}};
    write_file(std::filesystem::path(out_dir) / "results.json", document.dump(2) + "\n");
    fmt::print(stderr, "wrote {}/results.json and {} SVG plots ({:.0f} s)\n", out_dir,
               profiles.size(), wall);
  } catch (const std::exception& e) {
    fmt::print(stderr, "optpipe-bench: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
