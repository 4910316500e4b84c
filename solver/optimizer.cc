#include "solver/optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <stop_token>
#include <thread>
#include <vector>

#include "bounds/makespan_lower_bound.h"
#include "bounds/sequencing_bound.h"
#include "heuristics/list_policies.h"
#include "heuristics/offload_placement.h"
#include "heuristics/offload_recompute_pruning.h"
#include "model/dependencies.h"
#include "solver/cbc_backend.h"
#include "solver/local_search.h"
#include "solver/microbatch_order.h"
#include "solver/milp_segment.h"
#include "solver/order_model.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {

namespace {

constexpr double kImprovement = 1e-9;
// --effort 1's work budget (WorkBudget): a few seconds at R = 8, m = 32 on one core
// (docs/solver.md).
constexpr double kEffortPolicyTimings = 2000;
constexpr double kEffortSearchSteps = 100000;
constexpr double kEffortCbcIterations = 40000;
constexpr double kEffortPruneTimings = 2000;
// CBC's LPs lose precision where the times span too many orders of magnitude: beside a makespan
// of 5·10^8 an op of 2 time units left Clp's simplex stalling for minutes, past the time limit,
// which CBC does not check there. Beyond this ratio of the makespan to the shortest op, CBC does
// not run.
constexpr double kMaxTimeRatioForCbc = 1e6;
// Of the list policies' timings, what their neighbourhood may take before the descents over
// per-rank limits.
constexpr double kNeighbourhoodShare = 0.5;
// The fastest policies of the neighbourhood that a descent starts from, one after the other
// while the list policies have work left: descents from slower starts often end faster.
constexpr size_t kDescents = 16;
// Policies are timed in batches of this many, each run abandoned above the limit known when its
// batch began: whatever the number of threads, the same runs end the same way.
constexpr size_t kPolicyBatch = 16;
constexpr double kNoLimit = std::numeric_limits<double>::infinity();
// Where the whole order is CBC's, of its iterations, what its first solve, before the climbs, may
// take.
constexpr double kProbeShare = 0.05;
// Where CBC runs after the climbs, the share of the search's steps the climbs take before it; the
// rest climbs after CBC, in proportion to the iterations CBC left unspent.
constexpr double kSearchShareBeforeCbc = 0.5;
// The local search climbs in this many lanes, each with its own random moves, whatever the number
// of threads (which only run them side by side). Lanes exchange their best orders after each
// epoch of kEpochSteps moves each.
constexpr int kSearchLanes = 2;
constexpr int64_t kEpochSteps = 256;
// A climb of the local search gives up after this many moves per action without a shorter
// makespan.
constexpr size_t kPatiencePerAction = 50;
// Random moves that kick a stalled local search out of its local optimum.
constexpr int kKickMoves = 20;
// Where climbs keep apart, how much longer than a lane's best the optimum it climbs again from
// may be: a walk that takes only better optima stays in fewer basins.
constexpr double kApartSlack = 0.01;
// CBC's root (its LP, cut passes and heuristics) runs whole, whatever its iteration limit: a
// solve starts only where its model's rows, at this many iterations each, fit CBC's whole budget
// of iterations (at --effort 1, models of up to 10,000 rows).
constexpr double kRootIterationsPerRow = 4;
// The simplex iterations of one window of window_microbatches microbatches (wider windows: in
// proportion).
constexpr int64_t kWindowIterations = 5000;

// The seed of one climb of the local search: the search's seed and the climb's number mixed, so
// that the climbs of two search seeds share no random moves (with their sum, seed 2's first climb
// was seed 1's second).
uint64_t climb_seed(uint64_t search_seed, uint64_t climb) {
  std::seed_seq mix{static_cast<uint32_t>(search_seed), static_cast<uint32_t>(search_seed >> 32),
                    static_cast<uint32_t>(climb), static_cast<uint32_t>(climb >> 32)};
  std::array<uint32_t, 2> seed;
  mix.generate(seed.begin(), seed.end());
  return (static_cast<uint64_t>(seed[0]) << 32) | seed[1];
}

// The shortest op of the problem that takes any time (infinity when none does).
double shortest_op(const Problem& problem) {
  double shortest = std::numeric_limits<double>::infinity();
  for (int s = 0; s < problem.num_stages(); ++s) {
    for (Op op : {Op::kForward, Op::kBackwardInput, Op::kBackwardWeight, Op::kRecompute,
                  Op::kOffload, Op::kReload}) {
      if (op == Op::kRecompute && !problem.stages[s].can_recompute()) continue;
      if (is_transfer(op) && !problem.offload_frees_memory(s)) continue;
      const double d = duration(problem, {op, s, 0});
      if (d > 0) shortest = std::min(shortest, d);
    }
  }
  return shortest;
}

// Offload and recompute actions: CBC windows keep them, so only the whole-order model, the list
// policies and the local search change them.
bool moves_activations(const Schedule& schedule) {
  for (const auto& actions : schedule.ranks) {
    for (const Action& a : actions) {
      if (is_transfer(a.ref.op) || a.ref.op == Op::kRecompute) return true;
    }
  }
  return false;
}

// Runs work(w) for w = 0 .. workers - 1, each on its own thread (w = 0 on the caller's), and
// rethrows the first exception any of them threw once all have ended.
template <typename Work>
void run_workers(int workers, const Work& work) {
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto guarded = [&](int w) {
    try {
      work(w);
    } catch (...) {
      const std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  };
  {
    std::vector<std::jthread> threads;
    for (int w = 1; w < workers; ++w) threads.emplace_back(guarded, w);
    guarded(0);
  }  // joined
  if (failure) std::rethrow_exception(failure);
}

// One lane of the local search (climb()): its climb, and the best order it found in an epoch.
struct SearchLane {
  std::optional<LocalSearch> search;  // nullopt between rounds
  uint64_t round = 0;
  size_t unsuccessful = 0;
  std::optional<Order> own;  // with `apart`: the optimum this lane climbs again from
  double own_best = kNoLimit;
  bool ended = false;  // its start did not time to a valid schedule
  std::optional<Order> found;
  double found_makespan = kNoLimit;
};

// One call of optimize(): the search from one seed, its work budget, its best schedule and bound.
class OptimizerRun {
 public:
  OptimizerRun(const Problem& problem, const OptimizerOptions& options,
               const ImprovementCallback& on_improvement)
      : problem_(problem),
        options_(options),
        on_improvement_(on_improvement),
        budget_(WorkBudget::at_effort(options.effort)),
        started_(std::chrono::steady_clock::now()) {}

  OptimizeResult run(const Schedule& seed) {
    best_ = seed;
    best_makespan_ = makespan_of(seed);
    problem_bound_ = options_.lower_bound ? *options_.lower_bound : makespan_lower_bound(problem_);
    stats_.bound = problem_bound_.value;
    {
      std::jthread ticker;
      if (options_.on_progress) ticker = std::jthread([this](std::stop_token stop) { tick(stop); });
      search();
    }  // the ticker has stopped
    if (!stopped()) prune_best();
    return finish();
  }

 private:
  void search() {
    if (done()) return;  // the seed meets the lower bound (or the target gap)
    if (options_.local_search) {
      explore_offloading_policies(budget_.policy_timings);
      if (done()) return;
      // The list policies offload eagerly: the climbs start faster, and spend no moves on
      // copies, from the best policy without those it does not need.
      if (improved_) prune_best();
    }
    const bool moves = moves_activations(best_);
    if (!improved_) {  // else order_ and current_ are the best policy's
      order_ = split_backward(order_of(best_));
      current_ = moves ? split_backward(problem_, best_) : simulate(problem_, order_, best_.method);
    }
    size_t ops = 0;
    for (const auto& refs : compute_order(order_).ranks) ops += refs.size();
    const double shortest = shortest_op(problem_);
    const bool cbc_fits = best_makespan_ <= kMaxTimeRatioForCbc * shortest;
    const bool whole = cbc_fits && ops <= static_cast<size_t>(options_.max_ops_for_whole_model);
    const bool cbc_follows = whole || (cbc_fits && !moves);
    if (options_.local_search) {
      if (whole) {  // small problems: CBC proves them before the search could
        solve_whole(static_cast<int64_t>(kProbeShare * budget_.cbc_iterations));
        if (done()) return;
      }
      // The whole share even where climbs stall: kicked climbs escape basins that CBC,
      // started from them, does not (docs/solver.md).
      climb(cbc_follows
                ? static_cast<int64_t>(kSearchShareBeforeCbc * budget_.search_steps)
                : budget_.search_steps,
            whole);
      if (done()) return;
    }
    if (whole) {
      solve_whole(cbc_iterations_left());
    } else if (!cbc_fits) {
      stats_.cbc = CbcUse::kSkippedTimeSpan;
      stats_.note = fmt::format(
          "the ops' times span more than {:g} (the shortest {:g}, the makespan {:g}), too wide "
          "for CBC's LPs, so only the list policies and the local search ran",
          kMaxTimeRatioForCbc, shortest, best_makespan_.load());
    } else if (moves_activations(best_)) {  // the local search may have added transfers
      stats_.cbc = CbcUse::kSkippedActivations;
      stats_.note = fmt::format(
          "windows keep offload and recompute as the schedule has them, so CBC re-optimises "
          "them only in orders of up to {} compute ops; this one has {}, so only the list "
          "policies and the local search ran",
          options_.max_ops_for_whole_model, ops);
    } else {
      stats_.cbc = CbcUse::kWindows;
      slide_windows();
    }
    // CBC may leave work unspent: windows too large to try, an order the search gave transfers
    // (no windows), a whole order solved early. The search climbs on with the steps it kept for
    // after CBC, in proportion.
    if (options_.local_search && cbc_follows && !done() && budget_.cbc_iterations > 0) {
      const double unspent = static_cast<double>(cbc_iterations_left()) / budget_.cbc_iterations;
      climb(static_cast<int64_t>(unspent * (1 - kSearchShareBeforeCbc) * budget_.search_steps),
            whole);
    }
  }

  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  }
  double remaining() const { return options_.time_limit_seconds - elapsed(); }
  // The safety cap: once past the time limit, the search stops, and says its result depends on
  // the machine.
  bool time_up() const {
    if (remaining() > 0) return false;
    time_capped_ = true;
    return true;
  }
  int64_t cbc_iterations_left() const {
    return std::max<int64_t>(0, budget_.cbc_iterations - stats_.work.cbc_iterations);
  }

  // Reports the search's state whenever it has reported nothing for a progress interval, until
  // asked to stop.
  void tick(const std::stop_token& stop) {
    std::mutex mutex;
    std::condition_variable_any wake;
    const double interval = options_.progress_interval_seconds;
    double wait = interval;
    std::unique_lock wait_lock(mutex);
    while (true) {
      wake.wait_for(wait_lock, stop, std::chrono::duration<double>(wait), [] { return false; });
      if (stop.stop_requested()) return;
      const std::lock_guard lock(best_mutex_);
      const double quiet = elapsed() - last_report_;
      if (quiet < 0.99 * interval) {  // an improvement was reported meanwhile
        wait = interval - quiet;
        continue;
      }
      last_report_ = elapsed();
      options_.on_progress({last_report_, best_makespan_, stats_.bound});
      wait = interval;
    }
  }

  // Times `order` with the simulator (no action before its `not_before`, if given, else each
  // allocation waiting for the offloads that make room for it) and keeps it when it validates and
  // beats the best.
  bool offer(const Order& order, const OpTable<double>* not_before = nullptr) {
    SimulationOutcome timed = not_before ? try_simulate(problem_, order, "milp", *not_before)
                                         : try_simulate_within_budget(problem_, order, "milp");
    if (!timed.schedule) return false;  // a decoded order that deadlocks is not an improvement
    return offer(std::move(*timed.schedule), order);
  }

  // Either timing of a whole-order solution may be the better valid one: as early as the order
  // allows, or no earlier than the solution, where an op may wait for an offload to free memory.
  void offer_solution(const OrderModel& model, const std::vector<double>& solution) {
    const Order order = model.decode(solution);
    offer(order);
    const OpTable<double> not_before = model.release_times(solution);
    offer(order, &not_before);
  }

  // Keeps `candidate`, the timing of `order`, when it validates and beats the best. Called from
  // one thread at a time, in an order that does not depend on the threads: the lock is for the
  // ticker.
  bool offer(Schedule candidate, const Order& order) {
    if (makespan_of(candidate) >= best_makespan_ - kImprovement) return false;  // cheap first
    if (validate(problem_, candidate)) return false;
    Metrics metrics = compute_metrics(problem_, candidate, problem_bound_);
    raise_lower_bound(metrics, {stats_.bound, BoundSource::kSolver});
    const std::lock_guard lock(best_mutex_);
    if (metrics.makespan >= best_makespan_ - kImprovement) return false;
    best_ = candidate;
    best_makespan_ = metrics.makespan;
    improved_ = true;
    order_ = order;
    current_ = std::move(candidate);
    last_report_ = elapsed();
    if (on_improvement_) on_improvement_(best_, metrics);
    return true;
  }

  // AdaOffload's list scheduler under the neighbourhood of its policies
  // (heuristics/list_policies.h) for up to kNeighbourhoodShare of `timings`, then descents over
  // per-rank limits from the fastest of them in turn: where the order has to offload, these find
  // better placements than CBC or the local search, which then start from the best.
  void explore_offloading_policies(int64_t timings) {
    const int64_t until = stats_.work.policy_timings + timings;
    const std::vector<RatedPolicy> starts = fastest_policies(
        offloading_policy_neighbourhood(problem_),
        stats_.work.policy_timings + static_cast<int64_t>(kNeighbourhoodShare * timings),
        kDescents, kNoLimit);
    for (RatedPolicy current : starts) {
      while (stats_.work.policy_timings < until && !done()) {
        std::vector<RatedPolicy> better = fastest_policies(
            rank_limit_neighbours(problem_, current.policy), until, 1, current.makespan);
        if (better.empty()) break;  // a local optimum: the next start
        current = std::move(better.front());
      }
    }
  }

  struct RatedPolicy {
    ListPolicy policy;
    double makespan;
  };

  // Times `policies` in batches, the threads taking a batch's policies in turn, until the policy
  // timings reach `until`, and offers every schedule that fits the budget, in the policies'
  // order. Returns the `keep` fastest policies under `to_beat`, fastest first; a run sure to end
  // after the keep-th fastest known when its batch began is abandoned.
  std::vector<RatedPolicy> fastest_policies(const std::vector<ListPolicy>& policies,
                                            int64_t until, size_t keep, double to_beat) {
    std::vector<RatedPolicy> fastest;
    double limit = to_beat;
    for (size_t begin = 0; begin < policies.size();) {
      const int64_t left = until - stats_.work.policy_timings;
      if (left <= 0 || done()) break;
      const size_t end =
          std::min({policies.size(), begin + kPolicyBatch, begin + static_cast<size_t>(left)});
      std::vector<std::optional<OffloadedSchedule>> timed(end - begin);
      std::atomic<size_t> next = begin;
      run_workers(workers(), [&](int) {
        for (size_t i = next++; i < end; i = next++) {
          if (stopped()) return;
          ListPolicy policy = policies[i];
          policy.abandon_above_makespan = limit;
          std::optional<OffloadedSchedule> candidate = list_candidate(problem_, policy, "milp");
          if (candidate && candidate->fits()) timed[i - begin] = std::move(candidate);
        }
      });
      stats_.work.policy_timings += static_cast<int64_t>(end - begin);
      for (size_t i = begin; i < end; ++i) {
        std::optional<OffloadedSchedule>& candidate = timed[i - begin];
        if (!candidate) continue;
        const double makespan = makespan_of(candidate->schedule);
        if (makespan < limit - kImprovement) {
          const auto later =
              std::upper_bound(fastest.begin(), fastest.end(), makespan,
                               [](double m, const RatedPolicy& f) { return m < f.makespan; });
          fastest.insert(later, {policies[i], makespan});
          if (fastest.size() > keep) fastest.pop_back();
          if (fastest.size() == keep) limit = fastest.back().makespan;
        }
        offer(std::move(candidate->schedule), candidate->order);
      }
      begin = end;
    }
    return fastest;
  }

  // The local search (solver/local_search.h) from the best order for `steps` moves, in
  // kSearchLanes lanes, each with its own random moves. When a lane's climb stops finding shorter
  // makespans it climbs again from the best order after a random kick (iterated local search).
  // After each epoch the lanes' best orders are offered, in lane order, so they become the start
  // of what follows. With `apart`, a lane climbs again from its own last optimum instead, taking
  // one up to kApartSlack longer than its best: on whole orders climbs are short, and walks kept
  // apart reach basins that following the best misses; on longer orders following the best wins
  // (docs/solver.md).
  void climb(int64_t steps, bool apart) {
    size_t actions = 0;
    for (const auto& refs : order_.ranks) actions += refs.size();
    const size_t patience = kPatiencePerAction * actions;
    std::vector<SearchLane> lanes(kSearchLanes);
    for (int64_t left = steps; left >= kSearchLanes && !done();) {
      const int64_t epoch = std::min(kEpochSteps, left / kSearchLanes);
      const Order start = order_;
      const double to_beat = best_makespan_;
      std::atomic<int> next = 0;
      run_workers(std::min(workers(), kSearchLanes), [&](int) {
        for (int lane = next++; lane < kSearchLanes; lane = next++) {
          run_lane(lanes[lane], lane, start, to_beat, epoch, patience, apart);
        }
      });
      stats_.work.search_steps += epoch * kSearchLanes;
      left -= epoch * kSearchLanes;
      bool any = false;
      for (SearchLane& lane : lanes) {
        any = any || !lane.ended;
        if (!lane.found) continue;
        // Timed again from scratch, as the runtime shim will run it: what leaves the optimiser
        // never rests on the search's re-used timings (tests/local_search_test.cc checks that
        // they agree).
        offer(*lane.found);
        lane.found.reset();
        lane.found_makespan = kNoLimit;
      }
      if (!any) return;
    }
  }

  // `epoch` moves of one lane, its rounds starting from `start` (or its own optimum).
  void run_lane(SearchLane& lane, int index, const Order& start, double to_beat, int64_t epoch,
                size_t patience, bool apart) {
    for (int64_t step = 0; step < epoch && !lane.ended; ++step) {
      if (stopped()) return;
      if (!lane.search) {
        lane.search = LocalSearch::from(
            problem_, lane.own ? *lane.own : start,
            climb_seed(options_.search_seed, lane.round * kSearchLanes + index));
        if (!lane.search) {  // the order re-timed does not reproduce a valid schedule
          lane.ended = true;
          return;
        }
        if (lane.round > 0) lane.search->perturb(kKickMoves);
        lane.unsuccessful = 0;
      }
      LocalSearch& search = *lane.search;
      if (search.step()) {
        lane.unsuccessful = 0;
        if (search.makespan() < std::min(to_beat, lane.found_makespan) - kImprovement) {
          lane.found = search.order();
          lane.found_makespan = search.makespan();
        }
      } else if (++lane.unsuccessful >= patience) {  // the round ends: a kick, then climb again
        if (apart && search.makespan() <= lane.own_best * (1 + kApartSlack)) {
          lane.own = search.order();
          lane.own_best = std::min(lane.own_best, search.makespan());
        }
        lane.search.reset();
        ++lane.round;
      }
    }
  }

  // The search keeps offloads and recomputes wherever dropping them does not shorten the
  // makespan, and a seed kept may carry some its budget does without; the best schedule goes
  // without those it does not need, no slower (heuristics/offload_recompute_pruning.h). Where it is
  // faster, it is an improvement like any other.
  void prune_best() {
    if (!moves_activations(best_)) return;
    const auto deadline = started_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                         std::chrono::duration<double>(std::min(
                                             options_.time_limit_seconds, 100 * 365.25 * 86400)));
    // order_ is the search's best order; a kept seed's is read off its schedule, in its own form.
    const Order order = improved_ ? order_ : order_of(best_);
    std::optional<PrunedOrder> pruned = prune_offloads_and_recomputes(
        problem_, order, best_,
        {.deadline = deadline, .max_timings = static_cast<size_t>(budget_.prune_timings)});
    time_up();  // the deadline may have cut it short
    if (!pruned) return;
    stats_.offloads_dropped += pruned->offloads_dropped;
    stats_.recomputes_dropped += pruned->recomputes_dropped;
    if (offer(pruned->schedule, pruned->order)) return;
    best_makespan_ = makespan_of(pruned->schedule);  // no slower
    order_ = std::move(pruned->order);
    current_ = pruned->schedule;
    best_ = std::move(pruned->schedule);
  }

  // Threads for the list policies and the local search's lanes.
  int workers() const { return std::max(1, options_.threads); }

  // Serial, on iterations: the same solve on any machine, unless the time limit comes first.
  CbcOptions cbc_options(int64_t iterations) const {
    return {std::max(0.05, remaining()), 0, options_.verbose, [this] { return done(); },
            iterations};
  }

  // Whether CBC's root on `model` fits its budget of iterations (kRootIterationsPerRow).
  bool root_fits(const LinearModel& model) const {
    return static_cast<double>(model.rows.size()) * kRootIterationsPerRow <=
           static_cast<double>(budget_.cbc_iterations);
  }

  // Counts a solve against the iterations and notes whether the time limit stopped it.
  void count(const SolveResult& result) {
    stats_.nodes += result.nodes;
    stats_.work.cbc_iterations += result.iterations;
    if (result.time_limit_reached) time_capped_ = true;
  }

  // The best order and its timing in the form the order model admits as its MIP start: the
  // search may run same-stage W ops or transfers out of microbatch order, which the model's
  // symmetry rows forbid, and CBC would then start without an incumbent.
  struct ModelStart {
    Order order;
    Schedule current;
  };
  ModelStart model_start() const {
    Schedule relabelled = in_microbatch_order(current_);
    if (validate(problem_, relabelled)) return {order_, current_};  // F or B out of order too
    return {in_microbatch_order(order_), std::move(relabelled)};
  }

  // Whole orders also decide each activation's keep / offload / recompute. About `iterations`
  // simplex iterations at most (CBC checks between nodes).
  void solve_whole(int64_t iterations) {
    if (iterations <= 0 || time_up() || whole_too_large_) return;
    const ModelStart start = model_start();
    const Order compute = compute_order(start.order);
    const Segment everything = whole_order(compute);
    const OrderModel model(problem_, compute, start.current, everything,
                           SegmentObjective::kMakespan, ActivationChoice::kDecide);
    if (!root_fits(model.model())) {
      whole_too_large_ = true;
      stats_.cbc = CbcUse::kSkippedModelSize;
      stats_.note = fmt::format(
          "the whole-order MILP has {} rows, more than --effort {:g} gives CBC's root ({:g} "
          "rows), so only the list policies and the local search ran",
          model.model().rows.size(), options_.effort,
          budget_.cbc_iterations / kRootIterationsPerRow);
      return;
    }
    stats_.cbc = CbcUse::kWholeOrder;
    const SolveResult result = solve_with_cbc(
        model.model(), model.start_solution(), cbc_options(iterations),
        [&](const std::vector<double>& x, double) { offer_solution(model, x); });
    count(result);
    if (!result.solution.empty()) offer_solution(model, result.solution);
    if (model.restricts_recompute()) {
      stats_.note = "the MILP runs R right before its B, so its bound holds for that form only";
      return;
    }
    const std::lock_guard lock(best_mutex_);  // the ticker reads the bound
    stats_.bound = std::max(stats_.bound, result.bound);
    if (result.status == SolveStatus::kOptimal) {
      // Proven: nothing beats the optimum, whatever the simulator's re-timing gained on top.
      stats_.bound = std::max(stats_.bound, std::min(result.objective, best_makespan_.load()));
      proven_by_cbc_ = true;
    }
  }

  // Windows of `width` microbatches slide by half a window; a pass that finds nothing doubles the
  // width, so the search moves to larger neighbourhoods until CBC's iterations are spent, as long as a
  // window stays small enough for CBC to finish its root in reasonable time.
  void slide_windows() {
    int width = std::max(1, options_.window_microbatches);
    while (window_fits() && !done()) {
      bool improved = false;
      bool too_large = false;
      const int stride = std::max(1, width / 2);
      for (int first = 0; first < problem_.microbatches && window_fits(); first += stride) {
        const ModelStart start = model_start();
        const Segment window = microbatch_band(problem_, start.order, first, width);
        if (window.size() > static_cast<size_t>(options_.max_ops_per_window)) {
          too_large = true;
          continue;
        }
        improved |= improve_window(start, window, width);
        if (done()) return;
      }
      if (!improved) {
        if (too_large || width >= problem_.microbatches) return;
        width = std::min(problem_.microbatches, 2 * width);
      }
    }
  }

  // Whether another window can run: CBC's iterations are left for it, and (the safety cap) one as long
  // as the longest so far ends within the time limit: CBC does not stop within its root.
  bool window_fits() const {
    if (cbc_iterations_left() <= 0) return false;
    if (remaining() > 0.05 && longest_window_ <= remaining()) return true;
    time_capped_ = true;
    return false;
  }

  bool improve_window(const ModelStart& start, const Segment& window, int width) {
    const double started = elapsed();
    const OrderModel model(problem_, start.order, start.current, window,
                           SegmentObjective::kMakespanThenRanks);
    if (!root_fits(model.model())) return false;
    const int64_t iterations =
        std::min(cbc_iterations_left(),
                 kWindowIterations * width / std::max(1, options_.window_microbatches));
    const SolveResult result =
        solve_with_cbc(model.model(), model.start_solution(), cbc_options(iterations), nullptr);
    ++stats_.windows;
    count(result);
    longest_window_ = std::max(longest_window_, elapsed() - started);
    if (result.solution.empty() || !offer(model.decode(result.solution))) return false;
    ++stats_.windows_improved;
    return true;
  }

  // The bound is rounded down (bounds/sequencing_bound.h), so a schedule that meets it may lie
  // a few last bits above it.
  bool proven_optimal() const {
    return best_makespan_ <= stats_.bound * (1 + 10 * kRoundingMargin) + kImprovement;
  }

  bool interrupted() const { return options_.interrupted && options_.interrupted(); }
  // What stops the search where the machine decides: an interrupt or the time limit.
  bool stopped() const { return interrupted() || time_up(); }
  bool within_target_gap() const {
    return options_.target_gap > 0 && best_makespan_ <= stats_.bound * (1 + options_.target_gap);
  }
  // Whether the search may stop before its work is spent: proven optimal, within the target gap,
  // interrupted or past the time limit.
  bool done() const { return proven_optimal() || within_target_gap() || stopped(); }

  OptimizeResult finish() {
    // CBC proves its optimum within its tolerances: at times of 10^8 its value can pass a valid
    // schedule's makespan by a few units. No lower bound is above a schedule that exists.
    stats_.bound = std::min(stats_.bound, best_makespan_.load());
    const bool optimal = proven_by_cbc_ || proven_optimal();
    stats_.status = optimal     ? SearchStatus::kOptimal
                    : improved_ ? SearchStatus::kImproved
                                : SearchStatus::kSeedKept;
    // The stop comes first in the note, then what limited the search on the way.
    const auto note_first = [this](const std::string& stop) {
      stats_.note = stats_.note.empty() ? stop : stop + "; " + stats_.note;
    };
    if (interrupted()) {
      stats_.stop_reason = StopReason::kInterrupted;
      note_first(
          fmt::format("interrupted after {:.1f} s: the best schedule found so far", elapsed()));
    } else if (time_capped_) {
      stats_.stop_reason = StopReason::kTimeLimit;
      note_first(fmt::format(
          "the time limit came before the work of --effort {:g} was done: another machine may "
          "compile another schedule",
          options_.effort));
    } else if (optimal) {
      stats_.stop_reason = StopReason::kProvenOptimal;
    } else if (within_target_gap()) {
      stats_.stop_reason = StopReason::kTargetGap;
      note_first(fmt::format("stopped within the target gap of {:g}%", 100 * options_.target_gap));
    } else {
      stats_.stop_reason = StopReason::kWorkDone;
    }
    stats_.objective = best_makespan_;
    stats_.gap = stats_.bound > 0 ? best_makespan_ / stats_.bound - 1 : 0;
    stats_.seconds = elapsed();
    return {best_, stats_};
  }

  const Problem& problem_;
  const OptimizerOptions& options_;
  const ImprovementCallback& on_improvement_;
  const WorkBudget budget_;
  std::chrono::steady_clock::time_point started_;
  // Guards best_, improved_, order_, current_ and last_report_ against the ticker.
  std::mutex best_mutex_;
  Schedule best_;
  std::atomic<double> best_makespan_ = 0;
  bool improved_ = false;
  bool proven_by_cbc_ = false;
  bool whole_too_large_ = false;  // the whole-order model's root does not fit the effort
  mutable std::atomic<bool> time_capped_ = false;
  Order order_;
  Schedule current_;
  LowerBound problem_bound_;  // the problem's, before CBC's (stats_.bound) rises above it
  SolverStats stats_;
  double longest_window_ = 0;  // wall seconds, model building included
  double last_report_ = 0;     // seconds of the last improvement or progress report
};

}  // namespace

WorkBudget WorkBudget::at_effort(double effort) {
  // Saturating: an effort past kMaxEffort (refused by the CLI) must not wrap to no work at all.
  const auto scaled = [effort](double units) {
    return static_cast<int64_t>(std::llround(std::clamp(effort, 0.0, kMaxEffort) * units));
  };
  return {.policy_timings = scaled(kEffortPolicyTimings),
          .search_steps = scaled(kEffortSearchSteps),
          .cbc_iterations = scaled(kEffortCbcIterations),
          .prune_timings = scaled(kEffortPruneTimings)};
}

OptimizeResult optimize(const Problem& problem, const Schedule& seed,
                        const OptimizerOptions& options,
                        const ImprovementCallback& on_improvement) {
  return OptimizerRun(problem, options, on_improvement).run(seed);
}

}  // namespace optpipe
