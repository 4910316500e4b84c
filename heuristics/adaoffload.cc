// AdaOffload (docs/design.md §5): the densest schedule that fits the budget. Candidate compute
// orders range from one microbatch at a time to ZB-H2's in-flight count, all with split backward
// (B, then W); each is fitted by offloading, where memory exceeds the budget, the live activations
// with the longest lifespans whose round trip fits (heuristics/offload_placement.h). The search
// looks for the densest candidate that fits, and offload is added only where memory exceeds the
// budget, so slack memory means a denser order and fewer offloads. Where the host link cannot
// carry what a dense order needs, fitting afterwards fails; candidates from the list scheduler
// that decides offloads as it goes (heuristics/list_offload.h) slow the order down only as far
// as the link requires; on long V-shape pipelines V-Half's or V-Min's order with offloads planned
// from its in-flight peaks (heuristics/planned_offload.h) keeps a steady pattern where the lists
// run in waves.
// The lists come first: they are cheap and usually the best, and a candidate whose compute order
// alone is no faster than the best fit is never fitted, so a good early fit spares the costly
// fitting of the rest.
#include "heuristics/adaoffload.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "heuristics/list_policies.h"
#include "heuristics/list_scheduler.h"
#include "heuristics/offload_orders.h"
#include "heuristics/offload_recompute_pruning.h"
#include "heuristics/pipeoffload.h"
#include "heuristics/planned_offload.h"
#include "heuristics/recomputing_lists.h"
#include "model/errors.h"
#include "timing/metrics.h"
#include "timing/simulator.h"

namespace optpipe {

namespace {

constexpr const char* kMethod = "adaoffload";
// Timings that dropping needless offloads and recomputes may take: those the schedule has room to
// keep go in a few, the others one per timing, earliest first.
constexpr size_t kPruneTimings = 32;

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
ListPolicy zero_bubble_policy(const Problem& problem, int extra_halves) {
  ListPolicy policy;
  policy.max_in_flight.resize(problem.ranks);
  for (int r = 0; r < problem.ranks; ++r) {
    const int d = problem.num_stages() - problem.stages_of_rank(r).front();
    policy.max_in_flight[r] = d + extra_halves * (d - 1) / 2;
  }
  return policy;
}

// What became of a candidate: it fits the budget (with offload), it does not, or its compute
// order alone is no faster than the best fit, so it was not fitted (whether it would fit is
// unknown).
enum class Verdict { kFits, kOverBudget, kTooSlow };

// The candidates AdaOffload tries, each fitted to the budget: keeps the best (better_offloaded).
class AdaOffloadSearch {
 public:
  explicit AdaOffloadSearch(const Problem& problem)
      : problem_(problem), recompute_(problem.any_stage_can_recompute()) {}

  // Fits `order` by offloading and keeps it if best (a deadlocking order counts as over budget:
  // this warm-up starves a rank, others remain).
  Verdict consider(const Order& order) {
    SimulationOutcome timed = try_simulate(problem_, order, kMethod);
    if (!timed.schedule) return Verdict::kOverBudget;
    return consider_timed(order, *timed.schedule);
  }

  // The same for the list scheduler's order under `policy` (without offload), which gives up as
  // soon as it cannot beat the best fit: its timing is the simulator's, so a slower order is
  // left out before the simulator times it.
  Verdict consider_listed(ListPolicy policy) {
    policy.abandon_above_makespan = best_fit_makespan();
    const ListOutcome outcome = list_schedule_with_outcome(problem_, policy);
    if (!outcome.deadlock.empty()) return Verdict::kOverBudget;
    if (outcome.abandoned || outcome.makespan >= best_fit_makespan()) return Verdict::kTooSlow;
    return consider(outcome.order);
  }

  // The same for an order the simulator has already timed, without transfers.
  Verdict consider_timed(const Order& order, const Schedule& timing) {
    // Offload never shortens a schedule: a compute order already slower than the best is out.
    if (makespan_of(timing) >= best_fit_makespan()) return Verdict::kTooSlow;
    OffloadedSchedule fitted =
        fit_offloads(problem_, order, timing, kMethod, OffloadChoice::kLongestLived,
                     OffloadSet(problem_), fit_goal());
    const bool fits = fitted.fits();
    const bool offloads = fitted.offloads > 0;
    offer(std::move(fitted));
    // Recompute instead of offload, where the link is what slows the fit down.
    if (offloads && recompute_) offer(summarize(problem_, order, timing));
    return fits ? Verdict::kFits : Verdict::kOverBudget;
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
  // Once a fit is known, a candidate over budget is of no use, unless recompute can fit it.
  FitGoal fit_goal() const {
    return found_fit() && !recompute_ ? FitGoal::kFitOnly : FitGoal::kLeastExcess;
  }
  // Infinity until a candidate fits.
  double best_fit_makespan() const {
    return found_fit() ? best_->makespan : std::numeric_limits<double>::infinity();
  }
  OffloadedSchedule take() { return std::move(*best_); }

 private:
  const Problem& problem_;
  const bool recompute_;  // some stage can recompute
  std::optional<OffloadedSchedule> best_;
};

// One chunk per rank: 1F1B with split backward first; if it fits (with offload), the denser
// Zero Bubble orders while they fit; if not, a binary search for the largest in-flight count on
// stage 0 that fits, since fewer in flight means less memory and a proportionally slower pipe.
// An order too slow to beat the best fit is passed over towards denser ones: leaner ones are
// slower still.
void search_one_chunk(const Problem& problem, AdaOffloadSearch& search) {
  const int stages = problem.num_stages();
  if (search.consider(scaled_1f1b_order(problem, stages)) != Verdict::kOverBudget) {
    for (int extra_halves : {0, 1, 2}) {
      if (search.consider_listed(zero_bubble_policy(problem, extra_halves)) ==
          Verdict::kOverBudget) {
        break;
      }
    }
    return;
  }
  int lo = 1, hi = stages - 1;
  while (lo <= hi) {
    const int mid = (lo + hi) / 2;
    if (search.consider(scaled_1f1b_order(problem, mid)) != Verdict::kOverBudget) {
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
}

// Several chunks per rank: grouped interleaved orders over group sizes and warm-ups (extra
// forwards per rank below the last, Megatron's is 2; smaller is leaner and, with g < R, often
// as fast), tried fastest first until the compute order alone is no faster than the best fit.
void search_chunks(const Problem& problem, AdaOffloadSearch& search) {
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
    // Leanest first: a deeper warm-up that is no faster than a leaner one only holds more.
    double fastest_leaner = std::numeric_limits<double>::infinity();
    for (double extra : {0.25, 0.5, 1.0, 2.0}) {
      Order order = grouped_interleaved_order(problem, group,
                                              interleaved_warmup(problem, group, extra), true);
      // Deadlocked: this warm-up is too deep for the group (the wrap-around waits on itself).
      SimulationOutcome timed = try_simulate(problem, order, kMethod);
      if (!timed.schedule) continue;
      const double makespan = makespan_of(*timed.schedule);
      if (makespan >= fastest_leaner) continue;
      fastest_leaner = makespan;
      prepared.push_back({std::move(order), std::move(*timed.schedule), makespan});
    }
  }
  std::stable_sort(prepared.begin(), prepared.end(),
                   [](const Prepared& a, const Prepared& b) { return a.makespan < b.makespan; });
  for (const Prepared& p : prepared) {
    if (search.consider_timed(p.order, p.timing) == Verdict::kTooSlow) break;
  }
}

// PipeOffload's schedule, or where a fit is known only its compute orders that could beat it.
void offer_pipeoffload(const Problem& problem, AdaOffloadSearch& search) {
  if (!search.found_fit()) {
    search.offer(pipeoffload_schedule(problem));
  } else if (auto faster = pipeoffload_schedule_faster_than(problem, search.best_fit_makespan(),
                                                            search.fit_goal())) {
    search.offer(std::move(*faster));
  }
}

// Offload decided while scheduling, over how long-lived an activation must be to go (in older
// microbatches awaiting B) and how early it comes back, the later chunk's F first (with several
// chunks per rank it drains the pipeline, usually the faster) before the earlier's; Ws fill the
// gaps that fit them (the neighbourhood's most frequent winner, heuristics/list_policies.h).
// Its orders carry their transfers, so they are only timed: the search keeps one that fits. A
// run is abandoned once it cannot beat the best fit, and policies often agree (thresholds that
// no activation reaches): an order already timed is not timed again.
void search_offloading_lists(const Problem& problem, AdaOffloadSearch& search) {
  std::vector<Order> timed;
  auto already_timed = [&](const Order& order) {
    return std::any_of(timed.begin(), timed.end(),
                       [&](const Order& t) { return t.ranks == order.ranks; });
  };
  auto try_policy = [&](const ListOffloadPolicy& rules, bool later_first, double factor) {
    ListPolicy policy = offloading_list_policy(problem, rules, later_first, factor);
    policy.weights = WeightTiming::kGapAware;
    policy.abandon_above_makespan = search.best_fit_makespan();
    ListOutcome outcome = list_schedule_with_outcome(problem, policy);
    // A starved rank under this policy: the others remain.
    if (!outcome.deadlock.empty() || outcome.abandoned || already_timed(outcome.order)) return;
    timed.push_back(outcome.order);
    if (std::optional<OffloadedSchedule> candidate =
            try_time_with_simulator(problem, std::move(outcome.order), kMethod)) {
      search.offer(std::move(*candidate));
    }
  };
  for (bool later_first : {true, false}) {
    if (later_first && problem.chunks_per_rank == 1) continue;
    for (int min_awaiting : {1, 2, 3, 4}) {
      for (int lookahead : {1, 2}) try_policy({min_awaiting, lookahead, 0.0}, later_first, 1.0);
    }
  }
  if (!is_long_pipeline(problem)) return;
  // Eager offload, its offloads waiting for their channel (shared for long on long pipelines),
  // 10% under the budget: the ledger's channel times are estimates where ranks share one.
  const double channel_wait = channel_wait_unit(problem);
  for (bool later_first : {true, false}) {
    if (later_first && problem.chunks_per_rank == 1) continue;
    for (int min_awaiting : {1, 2}) {
      try_policy({min_awaiting, 2, channel_wait, true}, later_first, 0.9);
    }
  }
}

// Every activation of the stages that can recompute recomputed (heuristics/recomputing_lists.h),
// and memory-limited orders at 2 and 4 times the budget with recompute covering the excess: the
// densest orders where the memory-limited ones hold few microbatches in flight.
void search_recomputing_lists(const Problem& problem, AdaOffloadSearch& search) {
  for (bool later_first : {false, true}) {
    if (later_first && problem.chunks_per_rank == 1) continue;
    // A starved rank in the view: the other candidates remain.
    std::optional<Order> order = recomputing_list_order(problem, later_first);
    if (!order) continue;
    if (std::optional<OffloadedSchedule> candidate =
            try_time_with_simulator(problem, std::move(*order), kMethod)) {
      search.offer(std::move(*candidate));
    }
  }
}

// The best order without the offloads and recomputes it does not need, where it stays as fast
// (heuristics/offload_recompute_pruning.h): the lists offload eagerly, and fitting recomputes where
// the link is slow. A copy left out also leaves its channel to the others, so the order may end
// sooner. At most kPruneTimings timings, so that the result is the same on any machine.
OffloadedSchedule trimmed(const Problem& problem, OffloadedSchedule best) {
  if (!best.fits()) return best;
  std::optional<PrunedOrder> pruned = prune_offloads_and_recomputes(
      problem, best.order, best.schedule, {.max_timings = kPruneTimings});
  if (!pruned) return best;
  pruned->schedule.method = kMethod;  // timed by the simulator with the memory fence
  return summarize(problem, std::move(pruned->order), std::move(pruned->schedule));
}

// The best order found, timed by the simulator.
OffloadedSchedule adaoffload_search(const Problem& problem) {
  AdaOffloadSearch search(problem);
  if (problem.offload) search_offloading_lists(problem, search);
  if (auto planned = planned_offload_schedule(problem, kMethod, search.best_fit_makespan())) {
    search.offer(std::move(*planned));
  }
  if (problem.chunks_per_rank == 1) {
    search_one_chunk(problem, search);
  } else {
    search_chunks(problem, search);
    // PipeOffload's grouped orders with fixed offload sets sometimes win on few ranks: AdaOffload
    // is never worse than it.
    if (pipeoffload_unsupported(problem).empty()) offer_pipeoffload(problem, search);
  }
  // Memory-limited list orders: the only dense candidates for several chunks off the loop
  // placement, and often better than the others. The exact budget first: its orders need no
  // offload, so they are cheap to fit and, fitting, spare the fitting of denser ones no faster.
  std::vector<double> factors = {1.0};
  if (problem.offload) factors = {1.0, 1.5, 2.0};
  for (double factor : factors) {
    for (bool later_first : {false, true}) {
      if (later_first && problem.chunks_per_rank == 1) continue;
      search.consider_listed(memory_limited_policy(problem, factor, later_first));
    }
  }
  if (problem.any_stage_can_recompute()) search_recomputing_lists(problem, search);
  // One microbatch at a time: the leanest order, which never deadlocks.
  if (!search.found_fit()) search.consider(microbatch_serial_order(problem, true));
  return trimmed(problem, search.take());
}

}  // namespace

OffloadedSchedule adaoffload_schedule(const Problem& problem) {
  return adaoffload_search(problem);
}

Order adaoffload_order(const Problem& problem) {
  return adaoffload_search(problem).order;
}

}  // namespace optpipe
