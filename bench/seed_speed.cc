// How long AdaOffload takes to seed the MILP on a large pipeline (R = 32, m = 256): it must stay
// well under a second. Prints the compile time of a few budgets, with and without offload.
#include <fmt/format.h>

#include <chrono>

#include "compiler/problem.h"
#include "heuristics/offload_generators.h"

namespace {

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

}  // namespace

int main() {
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
        // compiler/simulate, which adaoffload_schedule includes.
        const auto start = std::chrono::steady_clock::now();
        const optpipe::Order seed = optpipe::adaoffload_order(problem);
        const auto seeded = std::chrono::steady_clock::now();
        const optpipe::OffloadedSchedule result =
            optpipe::time_with_simulator(problem, seed, "adaoffload");
        const auto timed = std::chrono::steady_clock::now();
        fmt::print("{:>12.2f} {:>8} {:>9.3f} {:>9.3f} {:>10.2f} {:>9} {:>5}\n", fraction,
                   offload ? "yes" : "no", std::chrono::duration<double>(seeded - start).count(),
                   std::chrono::duration<double>(timed - seeded).count(), result.makespan,
                   result.offloads, result.fits() ? "yes" : "no");
      }
    }
  }
  return 0;
}
