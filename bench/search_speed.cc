// How fast the local search moves (docs/benchmarks.md): moves per second, and the makespan it
// reaches in a fixed time from AdaOffload's order, on the suite's ample-link profiles at 33% of
// 1F1B's peak (loop2 layout), R = 4 to 32. The optimiser's gains at scale depend on this rate.
//   search_speed [SECONDS] [NAME]   SECONDS per profile (default 5); NAME: profiles containing it
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/suite.h"
#include "heuristics/registry.h"
#include "solver/local_search.h"
#include "timing/metrics.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace optpipe;
  const double seconds = argc > 1 ? std::atof(argv[1]) : 5;
  const std::string only = argc > 2 ? argv[2] : "";
  const std::vector<std::string> names = {"gpt-R4-m8-ample", "gpt-R8-m16-ample",
                                          "gpt-R16-m64-ample", "gpt-R32-m256-ample"};
  fmt::print("Local search from AdaOffload's order, loop2 layout, 33% of 1F1B's peak, {:g} s\n",
             seconds);
  fmt::print("{:<20} {:>8} {:>9} {:>10} {:>10} {:>10} {:>8}\n", "profile", "actions", "moves/s",
             "shorter", "seed", "reached", "ratio");
  for (const bench::ProfileSpec& profile : bench::suite_profiles(bench::SuiteKind::kFull)) {
    if (std::find(names.begin(), names.end(), profile.name) == names.end()) continue;
    if (profile.name.find(only) == std::string::npos) continue;
    for (const bench::BenchCase& c : bench::profile_cases(profile)) {
      if (c.budget_fraction > 0.34) continue;
      const auto variant = std::find_if(c.variants.begin(), c.variants.end(),
                                        [](const bench::Variant& v) { return v.name == "loop2"; });
      const Problem& problem = variant->problem;
      const Order seed = find_generator("adaoffload")->build(problem);
      std::optional<LocalSearch> search = LocalSearch::from(problem, seed, 1);
      if (!search) {
        fmt::print("{:<20} AdaOffload's order does not time within the budget\n", profile.name);
        continue;
      }
      size_t actions = 0;
      for (const auto& refs : seed.ranks) actions += refs.size();
      const double start_makespan = search->makespan();
      const auto start = Clock::now();
      long moves = 0;
      long shorter = 0;
      while (seconds_since(start) < seconds) {
        shorter += search->step();
        ++moves;
      }
      fmt::print("{:<20} {:>8} {:>9.0f} {:>10} {:>10.1f} {:>10.1f} {:>8.3f}\n", profile.name,
                 actions, moves / seconds_since(start), shorter, start_makespan, search->makespan(),
                 search->makespan() / start_makespan);
      std::fflush(stdout);
    }
  }
  return 0;
}
