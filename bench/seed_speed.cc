// How long the generators take on a large pipeline (R = 32, m = 256): every heuristic must stay
// well under a second (issue 6), AdaOffload above all since it seeds the MILP.
//   seed_speed [NAME]   NAME: time only the generators whose name contains it
// Prints the order time (wall and CPU: the machine may be shared) of every generator on the
// benchmark suite's gpt-R32-m256 profile (docs/benchmarks.md) at 100%, 50% and 33% of 1F1B's peak,
// then AdaOffload's on a synthetic profile with and without offload.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "bench/suite.h"
#include "heuristics/adaoffload.h"
#include "heuristics/offload_placement.h"
#include "heuristics/registry.h"
#include "model/problem.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

void time_every_generator(const std::string& only) {
  using namespace optpipe;
  const std::vector<bench::ProfileSpec> profiles = bench::suite_profiles(bench::SuiteKind::kFull);
  const bench::ProfileSpec profile =
      *std::find_if(profiles.begin(), profiles.end(),
                    [](const bench::ProfileSpec& p) { return p.name == "gpt-R32-m256-ample"; });
  fmt::print("Generator order time, {} (seconds; makespan of the simulated order)\n", profile.name);
  fmt::print("{:<18} {:<7} {:>7} {:>9} {:>9} {:>11} {:>5}\n", "generator", "layout", "budget",
             "order s", "cpu s", "makespan", "fits");
  for (const bench::BenchCase& c : bench::profile_cases(profile)) {
    if (c.budget_fraction == 0.75) continue;  // issue 6 asks for 100%, 50% and 33%
    for (const bench::Variant& variant : c.variants) {
      for (const Generator& generator : generators()) {
        if (generator.name.find(only) == std::string_view::npos) continue;
        if (!generator.unsupported_reason(variant.problem).empty()) continue;
        const auto start = Clock::now();
        const std::clock_t cpu_start = std::clock();
        const Order order = generator.build(variant.problem);
        const double cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
        const double seconds = seconds_between(start, Clock::now());
        const Schedule schedule =
            simulate_within_budget(variant.problem, order, std::string(generator.name));
        fmt::print("{:<18} {:<7} {:>6.0f}% {:>9.3f} {:>9.3f} {:>11.1f} {:>5}\n", generator.name,
                   variant.name, 100 * c.budget_fraction, seconds, cpu_seconds,
                   makespan_of(schedule), validate(variant.problem, schedule) ? "no" : "yes");
        std::fflush(stdout);
      }
    }
  }
}

optpipe::Problem large_problem(int ranks, int chunks, int microbatches, double budget_fraction,
                               bool offload) {
  using namespace optpipe;
  Problem p;
  p.name = "seed-speed";
  p.ranks = ranks;
  p.chunks_per_rank = chunks;
  p.microbatches = microbatches;
  p.rank_of_stage = place_stages(PlacementKind::kLoop, ranks, chunks);
  const int64_t activation = 1 << 20;
  const int stages = ranks * chunks;
  for (int s = 0; s < stages; ++s) {
    // Heavier first and last stages (embedding, head), as in real models.
    // With v chunks per rank each chunk is 1/v of the model's layers on that rank.
    const double weight = ((s == 0 || s == stages - 1) ? 1.3 : 1.0) / chunks;
    const int64_t bytes = activation / chunks;
    p.stages.push_back({1.0 * weight, 1.1 * weight, 0.9 * weight, bytes, bytes / 4, bytes * 3 / 4});
  }
  p.p2p_latency = 0.02;
  p.static_bytes.assign(ranks, int64_t{1} << 30);
  // 1F1B holds R - r activations on rank r; the budget is a fraction of rank 0's.
  const auto budget = static_cast<int64_t>(budget_fraction * ranks * activation);
  p.budget_bytes.assign(ranks, p.static_bytes[0] + budget);
  if (offload) {
    OffloadLink link;
    link.d2h_bytes_per_time = activation;  // one activation's offloadable part in 0.75 time units
    link.h2d_bytes_per_time = activation;
    link.channels = ChannelMode::kDuplex;
    for (int r = 0; r < ranks; ++r) link.link_group_of_rank.push_back(r / 2);
    p.offload = link;
  }
  return p;
}

void time_adaoffload_seed() {
  const int ranks = 32;
  const int microbatches = 256;
  for (const int chunks : {1, 2}) {
    fmt::print("AdaOffload compile time, R={} m={} v={}\n", ranks, microbatches, chunks);
    fmt::print("{:>12} {:>8} {:>9} {:>9} {:>10} {:>9} {:>5}\n", "budget/1F1B", "offload", "seed s",
               "simulate s", "makespan", "offloads", "fits");
    for (const bool offload : {false, true}) {
      for (const double fraction : {2.0, 1.0, 0.6, 0.3}) {
        const optpipe::Problem problem =
            large_problem(ranks, chunks, microbatches, fraction, offload);
        // The seed is the order (what the MILP starts from); the driver then times it once with
        // timing/simulate, which adaoffload_schedule includes.
        const auto start = Clock::now();
        const optpipe::Order seed = optpipe::adaoffload_order(problem);
        const auto seeded = Clock::now();
        const optpipe::OffloadedSchedule result =
            optpipe::time_with_simulator(problem, seed, "adaoffload");
        const auto timed = Clock::now();
        fmt::print("{:>12.2f} {:>8} {:>9.3f} {:>9.3f} {:>10.2f} {:>9} {:>5}\n", fraction,
                   offload ? "yes" : "no", seconds_between(start, seeded),
                   seconds_between(seeded, timed), result.makespan, result.offloads,
                   result.fits() ? "yes" : "no");
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  time_every_generator(only);
  if (std::string_view("adaoffload").find(only) != std::string_view::npos) time_adaoffload_seed();
  return 0;
}
