#include "heuristics/offload_placement.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <tuple>

#include "model/dependencies.h"
#include "timing/memory_timeline.h"
#include "timing/metrics.h"
#include "timing/simulator.h"

namespace optpipe {

namespace {

constexpr double kNotTimed = std::numeric_limits<double>::quiet_NaN();
constexpr double kEpsilon = 1e-9;
// Rounds of (choose offloads, place transfers, simulate); each round corrects the previous
// round's estimate of transfer times with the simulator's.
constexpr int kMaxRounds = 8;

// Start and end of every timed action.
struct Timing {
  OpTable<double> start;
  OpTable<double> end;
  Timing(const Problem& problem, const Schedule& schedule)
      : start(problem, kNotTimed), end(problem, kNotTimed) {
    for (const auto& actions : schedule.ranks) {
      for (const Action& a : actions) {
        start[a.ref] = a.start;
        end[a.ref] = a.end;
      }
    }
  }
  // Start of the backward (B or fused BW) of an activation.
  double backward_start(int stage, int mb) const {
    const double b = start[{Op::kBackwardInput, stage, mb}];
    return std::isnan(b) ? start[{Op::kBackward, stage, mb}] : b;
  }
};

// Ends of a rank's compute ops in list order (non-decreasing: one compute op at a time).
std::vector<double> compute_ends(const Order& compute_order, int rank, const Timing& timing) {
  std::vector<double> ends;
  ends.reserve(compute_order.ranks[rank].size());
  for (const OpRef& ref : compute_order.ranks[rank]) ends.push_back(timing.end[ref]);
  return ends;
}

// Index of the last op in `ends` that ends at or before `time`, or -1.
int last_ending_by(const std::vector<double>& ends, double time) {
  return static_cast<int>(std::upper_bound(ends.begin(), ends.end(), time + kEpsilon) -
                          ends.begin()) -
         1;
}

// Busy intervals of one copy channel, disjoint, keyed by start.
class ChannelSlots {
 public:
  void occupy(double start, double end) { busy_[start] = end; }
  // Latest start t <= latest with [t, t + length) free; may return less than any bound the
  // caller needs, which the caller checks.
  double latest_free_start(double latest, double length) const {
    double t = latest;
    while (true) {
      auto it =
          busy_.lower_bound(t + length - kEpsilon);  // first interval starting at or after the end
      if (it == busy_.begin()) return t;
      --it;  // the last interval starting before our end: the only one that can overlap
      if (it->second <= t + kEpsilon) return t;
      t = it->first - length;
    }
  }

 private:
  std::map<double, double> busy_;
};

struct Activation {
  int rank;
  int stage;
  int mb;
  double forward_end;
  double backward_start;
  double offload_start = 0;
  double offload_end = 0;
  double reload_start = 0;
};

OffloadedSchedule evaluate(const Problem& problem, const Order& compute_order,
                           const Schedule& timing, OffloadSet& offloaded,
                           const std::string& method) {
  Order order = insert_transfers(problem, compute_order, timing, offloaded);
  Schedule schedule = simulate_within_budget(problem, order, method);
  return summarize(problem, std::move(order), std::move(schedule));
}

// An activation that could leave the device for a while: from `away_from` until `away_until`
// it frees `bytes`; longer-lived ones go first.
struct AwayCandidate {
  int stage, mb;
  double lifespan, away_from, away_until;
  int64_t bytes;
};

// Sweeps a rank's memory steps: at every instant where live bytes exceed `budget`, takes the
// untaken candidates with the longest lifespans whose time away covers that instant until the
// estimate fits. Returns the indices taken; `unfixable` tells whether some instant stays over.
std::vector<size_t> choose_longest_lived(const std::vector<MemoryStep>& steps, int64_t budget,
                                         std::vector<AwayCandidate>& candidates, bool& unfixable) {
  std::stable_sort(
      candidates.begin(), candidates.end(),
      [](const AwayCandidate& a, const AwayCandidate& b) { return a.lifespan > b.lifespan; });
  std::vector<uint8_t> taken(candidates.size(), 0);
  std::vector<size_t> chosen;
  // Bytes that come back at future times, for candidates taken in this sweep.
  using Return = std::pair<double, int64_t>;
  std::priority_queue<Return, std::vector<Return>, std::greater<>> returns;
  int64_t adjust = 0;
  for (const MemoryStep& step : steps) {
    while (!returns.empty() && returns.top().first <= step.time + kEpsilon) {
      adjust += returns.top().second;
      returns.pop();
    }
    int64_t live = step.live_bytes + adjust;
    for (size_t c = 0; live > budget && c < candidates.size(); ++c) {
      const AwayCandidate& cand = candidates[c];
      if (taken[c] || cand.away_from > step.time + kEpsilon ||
          cand.away_until <= step.time + kEpsilon) {
        continue;
      }
      taken[c] = 1;
      chosen.push_back(c);
      adjust -= cand.bytes;
      live -= cand.bytes;
      returns.push({cand.away_until, cand.bytes});
    }
    if (live > budget) unfixable = true;
  }
  return chosen;
}

// Adds to `offloaded` activations of each rank that is over budget in `timing`: at every instant
// where the estimated live bytes exceed the budget, the live activations with the longest
// lifespans whose round trip fits and whose time on host covers that instant. Returns how many
// it added; `unfixable` tells whether some instant stays over budget even so.
int grow_longest_lived(const Problem& problem, const Order& compute_order,
                       const Schedule& timing_schedule, OffloadSet& offloaded,
                       const OffloadSet& rejected, bool& unfixable) {
  unfixable = false;
  const Timing timing(problem, timing_schedule);
  int added = 0;
  for (int r = 0; r < problem.ranks; ++r) {
    const std::vector<MemoryStep> steps = memory_timeline(problem, timing_schedule.ranks[r]);
    const int64_t budget = problem.activation_budget(r);
    if (peak_live_bytes(steps) <= budget) continue;
    const std::vector<double> ends = compute_ends(compute_order, r, timing);
    std::vector<AwayCandidate> candidates;
    for (const OpRef& ref : compute_order.ranks[r]) {
      if (ref.op != Op::kForward) continue;
      const int s = ref.stage;
      const int j = ref.microbatch;
      const int64_t bytes = problem.stages[s].offloadable_bytes;
      if (bytes <= 0 || offloaded.contains(s, j) || rejected.contains(s, j)) continue;
      const double f_end = timing.end[ref];
      const double b_start = timing.backward_start(s, j);
      const double away_from = f_end + problem.offload_time(s);
      const int issue_after = last_ending_by(ends, b_start - problem.reload_time(s));
      if (issue_after < 0) continue;
      const double away_until = ends[issue_after];
      if (away_until <= away_from + kEpsilon) continue;  // the round trip does not fit
      candidates.push_back({s, j, b_start - f_end, away_from, away_until, bytes});
    }
    for (size_t c : choose_longest_lived(steps, budget, candidates, unfixable)) {
      offloaded.add(candidates[c].stage, candidates[c].mb);
      ++added;
    }
  }
  return added;
}

// Adds to `recomputed` activations of each rank over budget in `schedule` (an order with its
// timing) that stay on the device and whose stage can recompute, longest-lived first. R(s, j)
// goes right before B(s, j), so it starts when the compute op listed before that B ends: until
// then the activation holds only its checkpoint bytes.
int grow_recomputed(const Problem& problem, const Order& order, const Schedule& schedule,
                    OpTable<uint8_t>& recomputed, bool& unfixable) {
  unfixable = false;
  const Timing timing(problem, schedule);
  int added = 0;
  for (int r = 0; r < problem.ranks; ++r) {
    const std::vector<MemoryStep> steps = memory_timeline(problem, schedule.ranks[r]);
    const int64_t budget = problem.activation_budget(r);
    if (peak_live_bytes(steps) <= budget) continue;
    // End of the compute op listed before each backward: when an R inserted there would start.
    OpTable<double> before_backward(problem, kNotTimed);
    double previous_end = kNotTimed;
    std::vector<OpRef> offloaded;
    for (const OpRef& ref : order.ranks[r]) {
      if (ref.op == Op::kOffload) offloaded.push_back(ref);
      if (!is_compute(ref.op)) continue;
      if (is_input_backward(ref.op)) {
        before_backward[{Op::kForward, ref.stage, ref.microbatch}] = previous_end;
      }
      previous_end = timing.end[ref];
    }
    std::vector<AwayCandidate> candidates;
    for (const OpRef& ref : order.ranks[r]) {
      const StageCosts& stage = problem.stages[ref.stage];
      if (ref.op != Op::kForward || !problem.recompute_frees_memory(ref.stage) || recomputed[ref] ||
          std::count(offloaded.begin(), offloaded.end(),
                     OpRef{Op::kOffload, ref.stage, ref.microbatch}) > 0) {
        continue;
      }
      const double away_until = before_backward[ref];
      if (std::isnan(away_until) || away_until <= timing.end[ref] + kEpsilon) continue;
      candidates.push_back({ref.stage, ref.microbatch,
                            timing.backward_start(ref.stage, ref.microbatch) - timing.end[ref],
                            timing.end[ref], away_until, stage.recomputed_bytes()});
    }
    for (size_t c : choose_longest_lived(steps, budget, candidates, unfixable)) {
      recomputed[{Op::kForward, candidates[c].stage, candidates[c].mb}] = 1;
      ++added;
    }
  }
  return added;
}

}  // namespace

Order with_recompute(const Order& order, const OpTable<uint8_t>& recomputed) {
  Order result;
  result.ranks.resize(order.ranks.size());
  for (size_t r = 0; r < order.ranks.size(); ++r) {
    for (const OpRef& ref : order.ranks[r]) {
      const bool backward = is_input_backward(ref.op);
      const OpRef forward{Op::kForward, ref.stage, ref.microbatch};
      const bool listed =
          !result.ranks[r].empty() &&
          result.ranks[r].back() == OpRef{Op::kRecompute, ref.stage, ref.microbatch};
      if (backward && recomputed[forward] && !listed) {
        result.ranks[r].push_back({Op::kRecompute, ref.stage, ref.microbatch});
      }
      result.ranks[r].push_back(ref);
    }
  }
  return result;
}

int64_t budget_excess(const Problem& problem, const Schedule& schedule) {
  int64_t excess = 0;
  for (int r = 0; r < problem.ranks; ++r) {
    const int64_t peak = peak_live_bytes(memory_timeline(problem, schedule.ranks[r]));
    excess += std::max<int64_t>(0, peak - problem.activation_budget(r));
  }
  return excess;
}

Order insert_transfers(const Problem& problem, const Order& compute_order, const Schedule& timing,
                       OffloadSet& offloaded) {
  if (!problem.offload) return compute_order;
  const Timing times(problem, timing);

  std::vector<Activation> moved;
  for (int r = 0; r < problem.ranks; ++r) {
    for (const OpRef& ref : compute_order.ranks[r]) {
      if (ref.op != Op::kForward || !offloaded.contains(ref.stage, ref.microbatch)) continue;
      const int s = ref.stage;
      const double f_end = times.end[ref];
      const double b_start = times.backward_start(s, ref.microbatch);
      if (!problem.offload_frees_memory(s) ||
          b_start - f_end < problem.offload_time(s) + problem.reload_time(s) - kEpsilon) {
        offloaded.remove(s, ref.microbatch);
        continue;
      }
      moved.push_back({r, s, ref.microbatch, f_end, b_start});
    }
  }

  // Offloads: earliest free slot after their F, served in the order their F end.
  std::vector<ChannelSlots> slots(num_channels(problem));
  std::vector<double> d2h_free(num_channels(problem), 0.0);
  std::stable_sort(moved.begin(), moved.end(), [](const Activation& a, const Activation& b) {
    return a.forward_end < b.forward_end;
  });
  for (Activation& a : moved) {
    const int channel = channel_of(problem, a.rank, Op::kOffload);
    a.offload_start = std::max(a.forward_end, d2h_free[channel]);
    a.offload_end = a.offload_start + problem.offload_time(a.stage);
    d2h_free[channel] = a.offload_end;
    slots[channel].occupy(a.offload_start, a.offload_end);
  }
  // Reloads: latest free slot before their B, latest B first so that each takes the slot it needs.
  std::stable_sort(moved.begin(), moved.end(), [](const Activation& a, const Activation& b) {
    return a.backward_start > b.backward_start;
  });
  std::vector<Activation> kept;
  kept.reserve(moved.size());
  for (Activation& a : moved) {
    const int channel = channel_of(problem, a.rank, Op::kReload);
    const double length = problem.reload_time(a.stage);
    a.reload_start = slots[channel].latest_free_start(a.backward_start - length, length);
    if (a.reload_start < a.offload_end - kEpsilon) {
      offloaded.remove(a.stage, a.mb);  // no room on the channel: keep it on the device
      continue;
    }
    slots[channel].occupy(a.reload_start, a.reload_start + length);
    kept.push_back(a);
  }

  // Transfers listed after a compute op (its index in the rank's compute order), by planned
  // start (offload before reload on a tie).
  struct Listed {
    int after;
    double planned;
    int kind;  // 0 offload, 1 reload
    OpRef ref;
  };
  std::vector<std::vector<Listed>> listed(problem.ranks);
  OpTable<int> position(problem, -1);
  std::vector<std::vector<double>> ends(problem.ranks);
  for (int r = 0; r < problem.ranks; ++r) {
    for (size_t i = 0; i < compute_order.ranks[r].size(); ++i) {
      position[compute_order.ranks[r][i]] = static_cast<int>(i);
    }
    ends[r] = compute_ends(compute_order, r, times);
  }
  for (const Activation& a : kept) {
    const int f_pos = position[{Op::kForward, a.stage, a.mb}];
    int b_pos = position[{Op::kBackwardInput, a.stage, a.mb}];
    if (b_pos < 0) b_pos = position[{Op::kBackward, a.stage, a.mb}];
    listed[a.rank].push_back({f_pos, a.offload_start, 0, {Op::kOffload, a.stage, a.mb}});
    const int r_pos = std::clamp(last_ending_by(ends[a.rank], a.reload_start), f_pos, b_pos - 1);
    listed[a.rank].push_back({r_pos, a.reload_start, 1, {Op::kReload, a.stage, a.mb}});
  }
  Order order;
  order.ranks.resize(problem.ranks);
  for (int r = 0; r < problem.ranks; ++r) {
    std::vector<Listed>& transfers = listed[r];
    std::stable_sort(transfers.begin(), transfers.end(), [](const Listed& a, const Listed& b) {
      return std::tie(a.after, a.planned, a.kind) < std::tie(b.after, b.planned, b.kind);
    });
    const std::vector<OpRef>& compute = compute_order.ranks[r];
    std::vector<OpRef>& refs = order.ranks[r];
    refs.reserve(compute.size() + transfers.size());
    auto next = transfers.begin();
    for (size_t i = 0; i < compute.size(); ++i) {
      refs.push_back(compute[i]);
      for (; next != transfers.end() && next->after == static_cast<int>(i); ++next) {
        refs.push_back(next->ref);
      }
    }
  }
  return order;
}

OffloadedSchedule summarize(const Problem& problem, Order order, Schedule schedule) {
  OffloadedSchedule result;
  result.order = std::move(order);
  result.schedule = std::move(schedule);
  result.excess_bytes = budget_excess(problem, result.schedule);
  result.makespan = makespan_of(result.schedule);
  for (const auto& refs : result.order.ranks) {
    result.offloads += static_cast<int>(std::count_if(
        refs.begin(), refs.end(), [](const OpRef& r) { return r.op == Op::kOffload; }));
  }
  return result;
}

// `order` with an OFFLOAD right after each offloaded F and its RELOAD after the compute op
// `lead` - delay[RELOAD] places before its B; an activation whose reload would come before its
// F's place stays on the device.
Order with_listed_transfers(const Problem& problem, const Order& order, const OffloadSet& offloaded,
                     int lead, const OpTable<int>& delay) {
  Order result;
  result.ranks.resize(problem.ranks);
  // Indexed by stage, which belongs to one rank: one table serves every rank.
  OpTable<int> forward_at(problem, -1);
  OpTable<uint8_t> reloaded(problem, 0);
  for (int r = 0; r < problem.ranks; ++r) {
    const std::vector<OpRef>& list = order.ranks[r];
    std::vector<std::vector<OpRef>> reloads_after(list.size());
    for (size_t q = 0; q < list.size(); ++q) {
      const OpRef& ref = list[q];
      if (ref.op == Op::kForward) forward_at[ref] = static_cast<int>(q);
      if (!is_input_backward(ref.op) || !offloaded.contains(ref.stage, ref.microbatch)) continue;
      const OpRef reload{Op::kReload, ref.stage, ref.microbatch};
      const int at = static_cast<int>(q) - std::max(1, lead - delay[reload]);
      if (at > forward_at[{Op::kForward, ref.stage, ref.microbatch}]) {
        reloads_after[at].push_back(reload);
      }
    }
    for (const auto& reloads : reloads_after) {
      for (const OpRef& reload : reloads) {
        reloaded[{Op::kForward, reload.stage, reload.microbatch}] = 1;
      }
    }
    for (size_t q = 0; q < list.size(); ++q) {
      const OpRef& ref = list[q];
      result.ranks[r].push_back(ref);
      if (ref.op == Op::kForward && reloaded[ref]) {
        result.ranks[r].push_back({Op::kOffload, ref.stage, ref.microbatch});
      }
      for (const OpRef& reload : reloads_after[q]) result.ranks[r].push_back(reload);
    }
  }
  return result;
}

OffloadedSchedule time_with_simulator(const Problem& problem, Order order,
                                      const std::string& method) {
  Schedule schedule = simulate_within_budget(problem, order, method);
  return summarize(problem, std::move(order), std::move(schedule));
}

std::optional<OffloadedSchedule> try_time_with_simulator(const Problem& problem, Order order,
                                                         const std::string& method) {
  SimulationOutcome timed = try_simulate_within_budget(problem, order, method);
  if (!timed.schedule) return std::nullopt;
  return summarize(problem, std::move(order), std::move(*timed.schedule));
}

bool better_offloaded(const OffloadedSchedule& a, const OffloadedSchedule& b) {
  if (a.fits() != b.fits()) return a.fits();
  if (!a.fits() && a.excess_bytes != b.excess_bytes) return a.excess_bytes < b.excess_bytes;
  if (a.makespan != b.makespan) return a.makespan < b.makespan;
  return a.offloads < b.offloads;
}

OffloadedSchedule fit_offloads(const Problem& problem, const Order& compute_order,
                               const Schedule& compute_timing, const std::string& method,
                               OffloadChoice choice, OffloadSet initial, FitGoal goal) {
  Schedule base = compute_timing;
  base.method = method;
  OffloadedSchedule best = summarize(problem, compute_order, std::move(base));
  if (!problem.offload) return best;
  if (choice == OffloadChoice::kLongestLived && best.fits()) return best;

  OffloadSet offloaded = std::move(initial);
  OffloadSet rejected(problem);
  Schedule timing = compute_timing;
  for (int round = 0; round < kMaxRounds; ++round) {
    int added = 0;
    bool unfixable = false;
    if (choice == OffloadChoice::kLongestLived) {
      added = grow_longest_lived(problem, compute_order, timing, offloaded, rejected, unfixable);
      if (added == 0) break;
      // Where only a fit will do, a first round that leaves an instant over budget whatever is
      // offloaded is not worth timing: on no problem of the benchmarks or tests did it fit.
      if (goal == FitGoal::kFitOnly && unfixable && round == 0) break;
    }
    const OffloadSet wanted = offloaded;
    OffloadedSchedule candidate = evaluate(problem, compute_order, timing, offloaded, method);
    // What placement dropped stays on the device from now on.
    for (int s = 0; s < problem.num_stages(); ++s) {
      for (int j = 0; j < problem.microbatches; ++j) {
        if (wanted.contains(s, j) && !offloaded.contains(s, j)) rejected.add(s, j);
      }
    }
    const bool fits = candidate.fits();
    const bool improved = better_offloaded(candidate, best);
    timing = candidate.schedule;
    if (improved) best = std::move(candidate);
    // Fixed sets and fitting schedules get another round to re-place transfers with the
    // simulated times while that helps; growing stops once nothing more can be offloaded.
    if ((fits || choice == OffloadChoice::kFixed) && (round >= 2 || (round >= 1 && !improved))) {
      break;
    }
    // Even offloading every candidate leaves an instant over budget, or the last round brought
    // the excess no lower: more rounds will not help.
    if ((unfixable && round == 0) || (!fits && !improved)) break;
    // Where only a fit will do, no more rounds once one is out of reach: they may still lower
    // the excess, but on no problem of the benchmarks or tests did they make a fixed set fit, or
    // a grown one after an instant stayed over budget whatever was offloaded.
    if (goal == FitGoal::kFitOnly && !fits && (unfixable || choice == OffloadChoice::kFixed)) {
      break;
    }
  }
  return best;
}

OffloadedSchedule fit_recompute(const Problem& problem, OffloadedSchedule fitted,
                                const std::string& method) {
  if (fitted.fits()) return fitted;
  OpTable<uint8_t> recomputed(problem, 0);
  Order order = fitted.order;
  Schedule timing = fitted.schedule;
  OffloadedSchedule best = std::move(fitted);
  for (int round = 0; round < kMaxRounds; ++round) {
    bool unfixable = false;
    if (grow_recomputed(problem, order, timing, recomputed, unfixable) == 0) break;
    order = with_recompute(order, recomputed);
    OffloadedSchedule candidate = time_with_simulator(problem, order, method);
    const bool improved = better_offloaded(candidate, best);
    timing = candidate.schedule;
    if (improved) best = std::move(candidate);
    if (best.fits() || !improved) break;
  }
  return best;
}

}  // namespace optpipe
