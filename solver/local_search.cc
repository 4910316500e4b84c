#include "solver/local_search.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "heuristics/timing_within_budget.h"
#include "solver/critical_path.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {

namespace {

constexpr double kTolerance = 1e-9;
// Of the moves, the share that changes how an activation is handled (where one can be), and the
// share that reorders two compute ops on the critical path; the rest swap random neighbours.
constexpr double kToggleShare = 0.1;
constexpr double kCriticalShare = 0.45;
// A new RELOAD goes up to this many actions before its backward: issued earlier, it is back in
// time more often, at the price of holding the memory longer.
constexpr int kMaxReloadLead = 4;
// Of the random reorders (the moves that neither toggle nor take a critical pair), the share that
// moves one action 2 to kMaxShift places instead of swapping two neighbours: a jump that a chain
// of swaps makes only through slower orders, which the climb refuses. On 33% ample at R = 8 it
// shortens the optimiser's schedules by 2-6% at 10 s (docs/solver.md).
constexpr double kShiftShare = 0.25;
constexpr int kMaxShift = 8;

// What the climb minimises among orders of the same makespan where no stage can recompute: the sum
// of the forwards' ends. A walk across a plateau then runs forwards no later, which fills the
// pipeline sooner and leaves room for the swaps that shorten the makespan. Where stages recompute,
// an early forward holds memory that a later R then has to free, and the walk goes every way
// (docs/solver.md).
double forward_ends(const Schedule& schedule) {
  double sum = 0;
  for (const auto& actions : schedule.ranks) {
    for (const Action& a : actions) {
      if (a.ref.op == Op::kForward) sum += a.end;
    }
  }
  return sum;
}

// Position of the action of (stage, mb) of type `op` in `refs`, or refs.size().
size_t position_of(const std::vector<OpRef>& refs, Op op, int stage, int mb) {
  return std::find(refs.begin(), refs.end(), OpRef{op, stage, mb}) - refs.begin();
}

}  // namespace

std::optional<LocalSearch> LocalSearch::from(const Problem& problem, Order start, uint64_t seed) {
  std::optional<Schedule> schedule = timing_within_budget(problem, start);
  if (!schedule || validate(problem, *schedule)) return std::nullopt;
  return LocalSearch(problem, std::move(start), std::move(*schedule), seed);
}

LocalSearch::LocalSearch(const Problem& problem, Order order, Schedule schedule, uint64_t seed)
    : problem_(&problem),
      toggles_(false),
      order_(std::move(order)),
      schedule_(std::move(schedule)),
      makespan_(makespan_of(schedule_)),
      early_forwards_(!problem.any_stage_can_recompute()),
      forward_ends_(early_forwards_ ? forward_ends(schedule_) : 0),
      rng_(seed) {
  for (int s = 0; s < problem.num_stages(); ++s) {
    toggles_ |= problem.offload_frees_memory(s) || problem.recompute_frees_memory(s);
  }
}

bool LocalSearch::try_move(double limit, bool climbing) {
  const double kind = std::uniform_real_distribution<double>(0, 1)(rng_);
  int rank = std::uniform_int_distribution<int>(0, problem_->ranks - 1)(rng_);
  std::optional<CriticalPair> critical;
  if (kind >= kToggleShare && kind < kToggleShare + kCriticalShare) {
    critical = random_critical_pair();
    if (critical) rank = critical->rank;
  }
  std::vector<OpRef>& refs = order_.ranks[rank];
  std::vector<OpRef> before = refs;
  std::optional<ListChange> changed;
  if (toggles_ && kind < kToggleShare) {
    changed = toggle_activation(refs);
  } else if (critical) {
    changed = reorder(refs, *critical);
  } else if (std::bernoulli_distribution(kShiftShare)(rng_)) {
    changed = shift(refs);
  } else {
    changed = swap_adjacent(refs);
  }
  std::optional<Schedule> timing;
  if (changed) {
    OrderRevision revision{unchanged_before(order_, schedule_, rank, changed->first)};
    if (changed->last) revision = {revision.unchanged_before, rank, changed->first, *changed->last};
    timing = timing_within_budget(*problem_, order_, &schedule_, revision, limit);
  }
  const bool fits = timing && makespan_of(*timing) <= limit + kTolerance;
  const double ends = fits && early_forwards_ ? forward_ends(*timing) : 0;
  const bool later_forwards_on_plateau = fits && climbing && early_forwards_ &&
                                         makespan_of(*timing) > makespan_ - kTolerance &&
                                         ends > forward_ends_ * (1 + kTolerance);
  if (!fits || later_forwards_on_plateau) {  // a move that made no change too
    refs = std::move(before);
    return false;
  }
  schedule_ = std::move(*timing);
  makespan_ = makespan_of(schedule_);
  forward_ends_ = ends;
  critical_.reset();
  return true;
}

std::optional<CriticalPair> LocalSearch::random_critical_pair() {
  if (!critical_) critical_ = critical_pairs(*problem_, schedule_);
  if (critical_->empty()) return std::nullopt;
  return (*critical_)[std::uniform_int_distribution<size_t>(0, critical_->size() - 1)(rng_)];
}

std::optional<LocalSearch::ListChange> LocalSearch::reorder(std::vector<OpRef>& refs,
                                                            const CriticalPair& pair) {
  const auto before = std::find(refs.begin(), refs.end(), pair.before);
  const auto after = std::find(before, refs.end(), pair.after);
  if (after == refs.end()) return std::nullopt;
  std::rotate(before, after, after + 1);  // `after` first; what was listed between stays after
  return ListChange{static_cast<size_t>(before - refs.begin()),
                    static_cast<size_t>(after - refs.begin()) + 1};
}

std::optional<LocalSearch::ListChange> LocalSearch::shift(std::vector<OpRef>& refs) {
  if (refs.size() < 3) return std::nullopt;
  const size_t from = std::uniform_int_distribution<size_t>(0, refs.size() - 1)(rng_);
  const int distance = std::uniform_int_distribution<int>(2, kMaxShift)(rng_);
  if (std::bernoulli_distribution(0.5)(rng_)) {  // later
    const size_t to = std::min(refs.size() - 1, from + distance);
    if (to <= from + 1) return std::nullopt;
    std::rotate(refs.begin() + from, refs.begin() + from + 1, refs.begin() + to + 1);
    return ListChange{from, to + 1};
  }
  const size_t to = from >= static_cast<size_t>(distance) ? from - distance : 0;
  if (to + 1 >= from) return std::nullopt;
  std::rotate(refs.begin() + to, refs.begin() + from, refs.begin() + from + 1);
  return ListChange{to, from + 1};
}

std::optional<LocalSearch::ListChange> LocalSearch::swap_adjacent(std::vector<OpRef>& refs) {
  if (refs.size() < 2) return std::nullopt;
  const size_t i = std::uniform_int_distribution<size_t>(0, refs.size() - 2)(rng_);
  std::swap(refs[i], refs[i + 1]);
  return ListChange{i, i + 2};
}

std::optional<LocalSearch::ListChange> LocalSearch::toggle_activation(std::vector<OpRef>& refs) {
  // The activation of a random F of this rank. The F's memory changes with a recompute, so the
  // move counts as changing the list from the F on.
  const size_t pick = std::uniform_int_distribution<size_t>(0, refs.size() - 1)(rng_);
  const auto forward = std::find_if(refs.begin() + pick, refs.end(),
                                    [](const OpRef& r) { return r.op == Op::kForward; });
  if (forward == refs.end()) return std::nullopt;
  size_t changed = forward - refs.begin();
  const int s = forward->stage;
  const int j = forward->microbatch;
  // A transfer the moves listed before its F changes the list from there on.
  auto erase = [&](Op op) {
    const size_t at = position_of(refs, op, s, j);
    if (at == refs.size()) return false;
    refs.erase(refs.begin() + at);
    changed = std::min(changed, at);
    return true;
  };
  if (erase(Op::kOffload)) {  // offloaded: keep it
    return erase(Op::kReload) ? std::optional(ListChange{changed}) : std::nullopt;
  }
  if (erase(Op::kRecompute)) return ListChange{changed};  // recomputed: keep it
  size_t backward = position_of(refs, Op::kBackwardInput, s, j);
  if (backward == refs.size()) backward = position_of(refs, Op::kBackward, s, j);
  const bool offload = problem_->offload_frees_memory(s);
  const bool recompute = problem_->recompute_frees_memory(s);
  if (backward == refs.size() || (!offload && !recompute)) return std::nullopt;
  if (recompute && (!offload || std::bernoulli_distribution(0.5)(rng_))) {
    refs.insert(refs.begin() + backward, {Op::kRecompute, s, j});
    return ListChange{changed};
  }
  const size_t after_forward = (forward - refs.begin()) + 1;
  refs.insert(refs.begin() + after_forward, {Op::kOffload, s, j});
  ++backward;
  const size_t lead = std::uniform_int_distribution<size_t>(0, kMaxReloadLead)(rng_);
  const size_t reload = std::max(after_forward + 1, backward - std::min(backward, lead));
  refs.insert(refs.begin() + reload, {Op::kReload, s, j});
  return ListChange{changed};
}

bool LocalSearch::step() {
  const double before = makespan_;
  return try_move(before, true) && makespan_ < before - kTolerance;
}

void LocalSearch::perturb(int moves) {
  for (int kept = 0, tries = 0; kept < moves && tries < 20 * moves; ++tries) {
    kept += try_move(std::numeric_limits<double>::infinity(), false);
  }
}

}  // namespace optpipe
