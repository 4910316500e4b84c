#include "heuristics/offload_recompute_pruning.h"

#include <algorithm>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "heuristics/offload_placement.h"
#include "heuristics/timing_within_budget.h"
#include "model/op_table.h"
#include "timing/memory_timeline.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {

namespace {

// Where two timings of the same work count as equally fast.
constexpr double kTolerance = 1e-9;

// An activation the schedule offloads (`ref` is its OFFLOAD) or recomputes (its R).
struct Saving {
  OpRef ref;
  double frees_from;   // when it frees memory: the offload's end, the R's start
  double frees_until;  // the reload's start; for an R, its start too
  bool frees_nothing() const { return frees_until <= frees_from; }
};

// The schedule's offloads and recomputes, those that free nothing first (a reload that starts as
// soon as its offload ends), then in time order.
std::vector<Saving> savings_of(const Problem& problem, const Schedule& schedule) {
  OpTable<double> offload_end(problem, -1.0);
  for (const auto& actions : schedule.ranks) {
    for (const Action& a : actions) {
      if (a.ref.op == Op::kOffload) offload_end[a.ref] = a.end;
    }
  }
  std::vector<Saving> savings;
  for (const auto& actions : schedule.ranks) {
    for (const Action& a : actions) {
      if (a.ref.op == Op::kRecompute) savings.push_back({a.ref, a.start, a.start});
      if (a.ref.op != Op::kReload) continue;
      const OpRef offload{Op::kOffload, a.ref.stage, a.ref.microbatch};
      const double end = offload_end[offload];
      if (end >= 0) savings.push_back({offload, end, std::max(end, a.start)});
    }
  }
  std::sort(savings.begin(), savings.end(), [](const Saving& a, const Saving& b) {
    if (a.frees_nothing() != b.frees_nothing()) return a.frees_nothing();
    return a.frees_from < b.frees_from;
  });
  return savings;
}

// `savings` with the offloads that the schedule, timed as it is, has room to keep moved to the
// front: in turn, each whose bytes fit under its rank's budget from its offload's end to its
// reload's start, with those taken before it kept as well. Their number. Dropped together they
// most often leave the timing as it was, so one timing can settle them all.
size_t room_first(const Problem& problem, const Schedule& schedule, std::vector<Saving>& savings) {
  std::vector<std::vector<MemoryStep>> timelines;
  for (const auto& actions : schedule.ranks) timelines.push_back(memory_timeline(problem, actions));
  const auto has_room = [&](const Saving& saving) {
    if (saving.ref.op != Op::kOffload) return false;
    const int rank = problem.rank_of_stage[saving.ref.stage];
    const int64_t bytes = problem.stages[saving.ref.stage].offloadable_bytes;
    std::vector<MemoryStep>& steps = timelines[rank];
    const auto at_or_after = [&](double t) {
      return std::lower_bound(steps.begin(), steps.end(), t,
                              [](const MemoryStep& s, double time) { return s.time < time; });
    };
    const auto from = at_or_after(saving.frees_from);
    const auto until = at_or_after(saving.frees_until);
    const int64_t limit = problem.activation_budget(rank) - bytes;
    if (std::any_of(from, until, [&](const MemoryStep& s) { return s.live_bytes > limit; })) {
      return false;
    }
    for (auto step = from; step != until; ++step) step->live_bytes += bytes;
    return true;
  };
  std::vector<Saving> with_room;
  std::vector<Saving> rest;
  for (const Saving& saving : savings) (has_room(saving) ? with_room : rest).push_back(saving);
  const size_t count = with_room.size();
  with_room.insert(with_room.end(), rest.begin(), rest.end());
  savings = std::move(with_room);
  return count;
}

// Whether `ref` goes with `saving`: the saving itself, or an offload's reload.
bool goes_with(const OpRef& saving, const OpRef& ref) {
  return ref == saving ||
         (saving.op == Op::kOffload && ref == OpRef{Op::kReload, saving.stage, saving.microbatch});
}

// Where a saving's removal first changes its rank's list: at the activation's F (its memory
// changes with a recompute), or at one of its transfers listed earlier.
size_t first_change(const std::vector<OpRef>& refs, const OpRef& saving) {
  const OpRef forward{Op::kForward, saving.stage, saving.microbatch};
  const auto it = std::find_if(refs.begin(), refs.end(), [&](const OpRef& r) {
    return r == forward || goes_with(saving, r);
  });
  return it - refs.begin();
}

// Drops savings from an order while its timing stays within the budget and no slower.
class Pruning {
 public:
  // `timing`: the order's own, by timing_within_budget(); `makespan`: the one not to exceed.
  Pruning(const Problem& problem, const Order& order, Schedule timing, double makespan,
          const PruneLimits& limits)
      : problem_(problem),
        makespan_(makespan),
        limits_(limits),
        pruned_{order, std::move(timing)} {}

  // All of `savings` at once where the order without them is no slower; else each half in turn,
  // down to single ones: a group of n with k needed costs about k log n timings, not n.
  void drop(std::span<const Saving> savings) {
    if (savings.empty() || timings_ >= limits_.max_timings ||
        std::chrono::steady_clock::now() >= limits_.deadline) {
      return;
    }
    if (drop_all(savings) || savings.size() == 1) return;
    const size_t half = savings.size() / 2;
    drop(savings.first(half));
    drop(savings.subspan(half));
  }

  // One round: the savings of the pruned schedule that it has room to keep, then each of the
  // others. Whether it dropped any.
  bool round() {
    const int before = dropped();
    std::vector<Saving> savings = savings_of(problem_, pruned_.schedule);
    const size_t with_room = room_first(problem_, pruned_.schedule, savings);
    drop(std::span(savings).first(with_room));
    for (size_t i = with_room; i < savings.size(); ++i) drop(std::span(savings).subspan(i, 1));
    return dropped() > before;
  }

  // The pruned order, validated whole; nullopt where nothing went.
  std::optional<PrunedOrder> result() && {
    if (dropped() == 0) return std::nullopt;
    if (validate(problem_, pruned_.schedule)) return std::nullopt;
    return std::move(pruned_);
  }

 private:
  bool drop_all(std::span<const Saving> savings) {
    Order order = pruned_.order;
    OrderRevision revision{std::numeric_limits<double>::infinity()};
    for (const Saving& saving : savings) {
      const int rank = problem_.rank_of_stage[saving.ref.stage];
      const size_t first = first_change(pruned_.order.ranks[rank], saving.ref);
      revision.unchanged_before =
          std::min(revision.unchanged_before,
                   unchanged_before(pruned_.order, pruned_.schedule, rank, first));
      std::erase_if(order.ranks[rank], [&](const OpRef& r) { return goes_with(saving.ref, r); });
    }
    ++timings_;
    std::optional<Schedule> timing =
        timing_within_budget(problem_, order, &pruned_.schedule, revision, makespan_);
    if (!timing || makespan_of(*timing) > makespan_ + kTolerance) return false;
    pruned_.order = std::move(order);
    pruned_.schedule = std::move(*timing);
    // A dropped R, or a copy's channel left to the others, may have shortened it.
    makespan_ = makespan_of(pruned_.schedule);
    for (const Saving& saving : savings) {
      ++(saving.ref.op == Op::kOffload ? pruned_.offloads_dropped : pruned_.recomputes_dropped);
    }
    return true;
  }

  int dropped() const { return pruned_.offloads_dropped + pruned_.recomputes_dropped; }

  const Problem& problem_;
  double makespan_;  // of the pruned order: each drop is no slower than the order before it
  const PruneLimits limits_;
  size_t timings_ = 0;
  PrunedOrder pruned_;
};

}  // namespace

std::optional<PrunedOrder> prune_offloads_and_recomputes(const Problem& problem, const Order& order,
                                                         const Schedule& schedule,
                                                         const PruneLimits& limits) {
  std::optional<Schedule> timing = timing_within_budget(problem, order);
  if (!timing) return std::nullopt;
  Pruning pruning(problem, order, std::move(*timing), makespan_of(schedule), limits);
  // Rounds until one drops nothing: a drop can make room for a saving an earlier try needed.
  while (pruning.round()) {
  }
  return std::move(pruning).result();
}

}  // namespace optpipe
