// AdaOffload (DESIGN.md §5): the densest schedule that fits the budget. Candidate compute orders
// range from one microbatch at a time to ZB-H2's in-flight count, all with split backward (B,
// then W); each is fitted by offloading, where memory exceeds the budget, the live activations
// with the longest lifespans whose round trip fits (heuristics/offload_placement.h). The search
// looks for the densest candidate that fits, and offload is added only where memory exceeds the
// budget, so slack memory means a denser order and fewer offloads. Where the host link cannot
// carry what a dense order needs, fitting afterwards fails; candidates from the list scheduler
// that decides offloads as it goes (heuristics/list_offload.h) slow the order down only as far
// as the link requires.
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "compiler/errors.h"
#include "compiler/simulator.h"
#include "heuristics/list_scheduler.h"
#include "heuristics/offload_generators.h"
#include "heuristics/offload_orders.h"

namespace optpipe {

namespace {

constexpr const char* kMethod = "adaoffload";

// Warm-ups for one chunk per rank that keep `first_in_flight` microbatches in flight on stage 0
// and proportionally fewer downstream: stage s holds ceil(c (S-s) / S). c = S is 1F1B; a smaller
// c slows the pipeline in proportion, where equal caps on consecutive ranks would serialise it.
Order scaled_1f1b_order(const Problem& problem, int first_in_flight) {
  const int stages = problem.num_stages();
  std::vector<int> warmup(problem.ranks, 0);
  for (int r = 0; r < problem.ranks; ++r) {
    const int ahead = stages - problem.stages_of_rank(r).front();
    warmup[r] =
        std::clamp((first_in_flight * ahead + stages - 1) / stages - 1, 0, problem.microbatches);
  }
  return grouped_interleaved_order(problem, problem.microbatches, warmup, true);
}

// The Zero Bubble list scheduler at `extra_halves` / 2 of 1F1B's in-flight count beyond it:
// 0 is ZB-H1, 2 is ZB-H2 (2(S-s) - 1); W fills the waits.
Order zero_bubble_order(const Problem& problem, int extra_halves) {
  ListPolicy policy;
  policy.max_in_flight.resize(problem.ranks);
  for (int r = 0; r < problem.ranks; ++r) {
    const int d = problem.num_stages() - problem.stages_of_rank(r).front();
    policy.max_in_flight[r] = d + extra_halves * (d - 1) / 2;
  }
  return list_schedule(problem, policy);
}

// The Zero Bubble list scheduler under `factor` times each rank's activation budget (byte
// accurate, deadlock-free on any placement): as many forwards as that memory holds.
ListPolicy memory_limited_policy(const Problem& problem, double factor, bool later_chunk_first) {
  ListPolicy policy;
  policy.memory_limit_bytes.resize(problem.ranks);
  for (int r = 0; r < problem.ranks; ++r) {
    policy.memory_limit_bytes[r] =
        static_cast<int64_t>(factor * static_cast<double>(problem.activation_budget(r)));
  }
  policy.later_chunk_first = later_chunk_first;
  return policy;
}

// Offload covering what exceeds the budget is fitted afterwards.
Order memory_limited_order(const Problem& problem, double factor, bool later_chunk_first) {
  return list_schedule(problem, memory_limited_policy(problem, factor, later_chunk_first));
}

// The list scheduler deciding offloads as it goes (heuristics/list_offload.h) under the exact
// budget: where the link cannot carry every in-flight activation, it offloads what the link can
// and admits forwards only as fast as the memory that frees allows.
Order offloading_list_order(const Problem& problem, const ListOffloadPolicy& offload,
                            bool later_chunk_first) {
  ListPolicy policy = memory_limited_policy(problem, 1.0, later_chunk_first);
  policy.offload = offload;
  return list_schedule(problem, policy);
}

// Ops per op type above which the memory-limited list scheduler, whose cost grows with the
// waiting a tight limit causes, is left out where the other candidates serve (the seed must
// stay fast).
constexpr int64_t kListSchedulerOps = 4096;

class Search {
 public:
  explicit Search(const Problem& problem)
      : problem_(problem),
        recompute_(std::any_of(problem.stages.begin(), problem.stages.end(),
                               [](const StageCosts& s) { return s.can_recompute(); })) {}

  // Fits `build()`'s order by offloading and keeps it if best; false when it does not fit (or
  // cannot beat the best even without offload, or deadlocks).
  bool consider(const std::function<Order()>& build) {
    Order order;
    Schedule timing;
    try {
      order = build();
      timing = simulate(problem_, order, kMethod);
    } catch (const Error&) {
      return false;  // this warm-up starves a rank; others remain
    }
    return consider_timed(std::move(order), timing);
  }

  // The same for an order already timed without transfers.
  bool consider_timed(Order order, const Schedule& timing) {
    // Offload never shortens a schedule: a compute order already slower than the best is out.
    if (best_ && best_->fits() && makespan_of(timing) >= best_->makespan) return false;
    OffloadedSchedule fitted = fit_offloads(problem_, order, timing, kMethod,
                                            OffloadChoice::kLongestLived, OffloadSet(problem_));
    const bool fits = fitted.fits();
    offer(std::move(fitted));
    return fits;
  }

  // A schedule found elsewhere, fitted by offload or not at all; where it exceeds the budget,
  // recompute covers what it can (the link had no room, or there is none).
  void offer(OffloadedSchedule candidate) {
    if (!candidate.fits() && recompute_) {
      candidate = fit_recompute(problem_, std::move(candidate), kMethod);
    }
    if (!best_ || better_offloaded(candidate, *best_)) best_ = std::move(candidate);
  }

  bool found_fit() const { return best_ && best_->fits(); }
  double best_makespan() const { return best_->makespan; }
  OffloadedSchedule take() { return std::move(*best_); }

 private:
  const Problem& problem_;
  const bool recompute_;  // some stage can recompute
  std::optional<OffloadedSchedule> best_;
};

// One chunk per rank: 1F1B with split backward first; if it fits (with offload), the denser
// Zero Bubble orders while they fit; if not, a binary search for the largest in-flight count on
// stage 0 that fits, since fewer in flight means less memory and a proportionally slower pipe.
void search_one_chunk(const Problem& problem, Search& search) {
  const int stages = problem.num_stages();
  if (search.consider([&] { return scaled_1f1b_order(problem, stages); })) {
    for (int extra_halves : {0, 1, 2}) {
      if (!search.consider([&] { return zero_bubble_order(problem, extra_halves); })) break;
    }
    return;
  }
  int lo = 1, hi = stages - 1;
  while (lo <= hi) {
    const int mid = (lo + hi) / 2;
    if (search.consider([&] { return scaled_1f1b_order(problem, mid); })) {
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
}

// Several chunks per rank: grouped interleaved orders over group sizes and warm-ups (extra
// forwards per rank below the last, Megatron's is 2; smaller is leaner and, with g < R, often
// as fast), tried fastest first until the compute order alone is slower than the best fit.
void search_chunks(const Problem& problem, Search& search) {
  const int ranks = problem.ranks;
  std::vector<int> groups = {ranks, (ranks + 1) / 2, (ranks + 3) / 4};
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  struct Prepared {
    Order order;
    Schedule timing;
    double makespan;
  };
  std::vector<Prepared> prepared;
  for (int group : groups) {
    for (double extra : {2.0, 1.0, 0.5, 0.25}) {
      Order order = grouped_interleaved_order(problem, group,
                                              interleaved_warmup(problem, group, extra), true);
      try {
        Schedule timing = simulate(problem, order, kMethod);
        const double makespan = makespan_of(timing);
        prepared.push_back({std::move(order), std::move(timing), makespan});
      } catch (const Error&) {
        // this warm-up is too deep for the group: the wrap-around waits on itself
      }
    }
  }
  std::stable_sort(prepared.begin(), prepared.end(),
                   [](const Prepared& a, const Prepared& b) { return a.makespan < b.makespan; });
  for (Prepared& p : prepared) {
    if (search.found_fit() && p.makespan >= search.best_makespan()) break;
    search.consider_timed(std::move(p.order), p.timing);
  }
}

// Offload decided while scheduling, over how long-lived an activation must be to go (in older
// microbatches awaiting B) and how early it comes back. Its orders carry their transfers, so
// they are only timed: the search keeps one that fits.
void search_offloading_lists(const Problem& problem, Search& search) {
  for (int min_awaiting : {1, 2, 3, 4}) {
    for (int lookahead : {1, 2}) {
      for (bool later_first : {false, true}) {
        if (later_first && problem.chunks_per_rank == 1) continue;
        const ListOffloadPolicy offload{min_awaiting, lookahead, 0.0};
        try {
          search.offer(time_with_simulator(
              problem, offloading_list_order(problem, offload, later_first), kMethod));
        } catch (const Error&) {
          // a starved rank under this policy; the others remain
        }
      }
    }
  }
}

// The best order found, timed by the simulator.
OffloadedSchedule adaoffload_search(const Problem& problem) {
  Search search(problem);
  if (problem.chunks_per_rank == 1) {
    search_one_chunk(problem, search);
  } else {
    search_chunks(problem, search);
    // PipeOffload's grouped orders with fixed offload sets sometimes win on few ranks: AdaOffload
    // is never worse than it.
    if (pipeoffload_unsupported(problem).empty()) search.offer(pipeoffload_schedule(problem));
  }
  // Memory-limited list orders: the only dense candidates for several chunks off the loop
  // placement, and on few ops often better than the others.
  const int64_t ops = int64_t{1} * problem.num_stages() * problem.microbatches;
  const bool grouped_fit =
      problem.chunks_per_rank == 1 || problem.placement == PlacementKind::kLoop;
  if (!grouped_fit || ops <= kListSchedulerOps) {
    std::vector<double> factors = {1.0};
    if (problem.offload) factors = {2.0, 1.5, 1.0};
    for (double factor : factors) {
      for (bool later_first : {false, true}) {
        if (later_first && problem.chunks_per_rank == 1) continue;
        search.consider([&] { return memory_limited_order(problem, factor, later_first); });
      }
    }
  }
  if (problem.offload) search_offloading_lists(problem, search);
  // One microbatch at a time: the leanest order, which never deadlocks.
  if (!search.found_fit()) search.consider([&] { return microbatch_serial_order(problem, true); });
  return search.take();
}

}  // namespace

OffloadedSchedule adaoffload_schedule(const Problem& problem) {
  return adaoffload_search(problem);
}

Order adaoffload_order(const Problem& problem) {
  return adaoffload_search(problem).order;
}

}  // namespace optpipe
