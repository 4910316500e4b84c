#include "bounds/sequencing_bound.h"

#include <algorithm>
#include <array>
#include <limits>
#include <queue>
#include <utility>
#include <vector>

#include "bounds/deferred_weights.h"
#include "bounds/microbatch_paths.h"
#include "bounds/paced_heads.h"
#include "bounds/paced_tails.h"
#include "bounds/rank_memory_need.h"

namespace optpipe {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// Where more ranks than this could raise the checkpoints' bound, one pacing sorts them first.
constexpr int kFewRanks = 2;
// The checkpoints' bound tries the counts one by one up to 7, then in ranges that grow by a
// quarter: [8, 9], [10, 11], [12, 14], [15, 17], ...
constexpr int kRangeGrowth = 4;
// Split at a moment, it tries the counts before and after it in ranges from these: 0, 1, 2, 3,
// 4-5, 6-7, 8+.
constexpr std::array<int, 7> kSplitLows = {0, 1, 2, 3, 4, 6, 8};
// Relative difference within which two sums of the same durations in different orders count as
// equal: far above their last bits, far below any schedule's spread.
constexpr double kSameSumMargin = 1e-9;
// Relative width at which the bisection over makespans stops: well below any schedule's spread.
constexpr double kBisectionPrecision = 1e-6;

// One op of a rank, as the relaxation sees it: it cannot start before `head` (from the
// schedule's first start) and the schedule runs at least `tail` after it ends.
struct Job {
  double head;
  double duration;
  double tail;
};

// OpHeads' members in the order of OpFamily's: F, B, W.
constexpr std::array<std::vector<std::vector<double>> OpHeads::*, 3> kHeadsOfType = {
    &OpHeads::forward, &OpHeads::backward, &OpHeads::weight};

// base + k · step: a head or a tail of the k-th op of a family.
struct Linear {
  double base;
  double step;
  double at(int k) const { return base + k * step; }
};

// The ops of one type on one stage, in the order they start (on one rank they never overlap,
// so that is also the order they end). Along a path of one microbatch's ops to (from) them, the
// k-th (from 0) starts at least base + k · step after the schedule's first start (ends at least
// base + k · step before its end from the last), with base the path's least length and step its
// longest op: k + 1 microbatches take turns at that op, the family's own included. A tail takes
// the longer of two paths: down to W(0), or to the stage's own W.
struct OpFamily {
  double duration;
  Linear head;
  Linear tail_via_stage_zero;
  Linear tail_via_own_weight;
};

double longest(const std::vector<double>& durations, int from, int to) {  // [from, to)
  double most = 0;
  for (int s = from; s < to; ++s) most = std::max(most, durations[s]);
  return most;
}

// Per stage: F, B and W with heads and tails from one microbatch's paths (docs/semantics.md).
std::vector<std::vector<OpFamily>> op_families(const Problem& problem,
                                               const MicrobatchPaths& paths) {
  const int stages = problem.num_stages();
  std::vector<double> f(stages), b(stages), w(stages);
  for (int s = 0; s < stages; ++s) {
    f[s] = problem.stages[s].forward;
    b[s] = problem.stages[s].backward_input;
    w[s] = problem.stages[s].backward_weight;
  }
  std::vector<std::vector<OpFamily>> families(stages);
  for (int s = 0; s < stages; ++s) {
    // From F(0): the forwards up to s; for B(s) and W(s) all forwards and the backwards from the
    // last stage back to s.
    const double backward_start = paths.forward_offset[s] + paths.round_trip[s] - b[s];
    const double backwards_to_s = longest(b, s, stages);
    const Linear forward_head{paths.forward_offset[s], longest(f, 0, s + 1)};
    const Linear backward_head{backward_start, std::max(longest(f, 0, stages), backwards_to_s)};
    // To the end: after B(s) the backwards below s and W(0), or W(s); after F(s) first the
    // forwards above s and the backwards from the last stage back to s.
    const double after_forward = paths.round_trip[s] - f[s];      // to the end of B(s)
    const double after_backward = paths.backward_tail[s] - b[s];  // to the end of W(0)
    const double forwards_above = longest(f, s + 1, stages);
    const double below_and_w0 = std::max(longest(b, 0, s), w[0]);
    families[s] = {
        {f[s],
         forward_head,
         {after_forward + after_backward,
          std::max({f[s], forwards_above, backwards_to_s, below_and_w0})},
         {after_forward + w[s], std::max({f[s], forwards_above, backwards_to_s, w[s]})}},
        {b[s],
         backward_head,
         {after_backward, std::max(b[s], below_and_w0)},
         {w[s], std::max(b[s], w[s])}},
        {w[s], {backward_start + b[s], std::max(backward_head.step, w[s])}, {0, w[s]}, {0, w[s]}},
    };
  }
  return families;
}

// Jackson's preemptive schedule: at every moment run the released job with the longest tail.
// Its largest end + tail is the least makespan of the one-machine relaxation with preemption,
// so no schedule of these jobs, preemptive or not, is shorter.
double jackson_preemptive_bound(std::vector<Job> jobs) {
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.head < b.head; });
  struct Running {
    double tail;
    double remaining;
    bool operator<(const Running& o) const { return tail < o.tail; }
  };
  std::priority_queue<Running> released;
  double now = 0;
  double bound = 0;
  size_t next = 0;
  while (next < jobs.size() || !released.empty()) {
    if (released.empty()) now = std::max(now, jobs[next].head);
    for (; next < jobs.size() && jobs[next].head <= now; ++next) {
      released.push({jobs[next].tail, jobs[next].duration});
    }
    Running job = released.top();
    released.pop();
    const double next_release =
        next < jobs.size() ? jobs[next].head : std::numeric_limits<double>::infinity();
    if (now + job.remaining > next_release) {  // preempted (or not) when the next job arrives
      job.remaining -= next_release - now;
      now = next_release;
      released.push(job);
    } else {
      now += job.remaining;
      bound = std::max(bound, now + job.tail);
    }
  }
  return bound;
}

// The least makespan of the rank's jobs beside the R time its memory needs by that makespan
// (RankMemoryNeed::recompute_time), `without` it. Each R runs after its F and before its B, so
// with preemption all of them are one job `recompute` with the earliest head and least tail of
// any; the time it takes falls as the makespan grows, so bisect, and report the failing end.
double with_recompute_time(std::vector<Job> jobs, Job recompute, const RankMemoryNeed& need,
                           double without) {
  if (need.recompute_time(without) == 0) return without;
  jobs.push_back(recompute);
  auto fits = [&](double makespan) {
    jobs.back().duration = need.recompute_time(makespan);
    return jobs.back().duration != kInfinity && jackson_preemptive_bound(jobs) <= makespan;
  };
  // Recomputing all that saves fits by then: it adds at most its time to Jackson's schedule.
  double fitting = std::max(without + need.total_recompute_time(), need.fitting_makespan());
  double failing = without;
  while (fitting - failing > 1e-12 * fitting) {
    const double mid = (failing + fitting) / 2;
    (fits(mid) ? fitting : failing) = mid;
  }
  return failing;
}

// The rank's F, B and W ops as jobs, with these heads, and with these paced tails of F and B
// (bounds/paced_tails.h) where they are longer than the paths'; every W free to wait for the end.
// Laid out per stage of the rank (in stages_of_rank order), its m Fs, then Bs, then Ws, k from 0.
std::vector<Job> rank_jobs_deferring_freely(const Problem& problem,
                                            const std::vector<std::vector<OpFamily>>& families,
                                            const OpHeads& heads, const OpHeads* tails, int rank) {
  const int m = problem.microbatches;
  std::vector<Job> jobs;
  for (int s : problem.stages_of_rank(rank)) {
    for (size_t type = 0; type < kHeadsOfType.size(); ++type) {
      const OpFamily& family = families[s][type];
      const auto of_type = kHeadsOfType[type];
      const bool paced = tails && !(tails->*of_type).empty();  // no paced tails of W
      for (int k = 0; k < m; ++k) {
        const int from_last = m - 1 - k;
        double tail = std::max(family.tail_via_stage_zero.at(from_last),
                               family.tail_via_own_weight.at(from_last));
        if (paced) tail = std::max(tail, (tails->*of_type)[s][from_last]);
        jobs.push_back({(heads.*kHeadsOfType[type])[s][k], family.duration, tail});
      }
    }
  }
  return jobs;
}

// Raises the tail of each W and the head of each B of `jobs` (rank_jobs_deferring_freely's
// layout) by the few Ws the rank's memory lets wait behind later Bs (bounds/deferred_weights.h).
void limit_deferred_weights(const Problem& problem, int rank, std::vector<Job>& jobs) {
  const int m = problem.microbatches;
  const std::vector<int> stages = problem.stages_of_rank(rank);
  auto job_at = [&](size_t stage_index, int type, int k) -> Job& {
    return jobs[(stage_index * kHeadsOfType.size() + type) * m + k];
  };
  constexpr int kBackward = 1, kWeight = 2;  // F, B, W
  double least_backward = kInfinity;
  double least_weight = kInfinity;
  std::vector<double> backward_tails, weight_heads;
  for (size_t i = 0; i < stages.size(); ++i) {
    least_backward = std::min(least_backward, problem.stages[stages[i]].backward_input);
    least_weight = std::min(least_weight, problem.stages[stages[i]].backward_weight);
    for (int k = 0; k < m; ++k) {
      backward_tails.push_back(job_at(i, kBackward, k).tail);
      weight_heads.push_back(job_at(i, kWeight, k).head);
    }
  }
  const int most_deferred =
      most_deferred_weights(problem, rank, static_cast<int>(backward_tails.size()));
  const std::vector<double> weight_tails =
      deferred_weight_tails(std::move(backward_tails), most_deferred, least_backward);
  const std::vector<double> backward_heads =
      deferred_backward_heads(std::move(weight_heads), most_deferred, least_weight);
  // The k-th op of a family is at least the k-th of the rank's ops of its type, and the bounds
  // grow with k.
  for (size_t i = 0; i < stages.size(); ++i) {
    for (int k = 0; k < m; ++k) {
      Job& weight = job_at(i, kWeight, k);
      weight.tail = std::max(weight.tail, weight_tails[m - 1 - k]);
      Job& backward = job_at(i, kBackward, k);
      backward.head = std::max(backward.head, backward_heads[k]);
    }
  }
}

// The rank's jobs for the bound: with paced tails, the memory also limits how many Ws wait
// behind later Bs; without (the unpaced bound), every W may.
std::vector<Job> rank_jobs(const Problem& problem,
                           const std::vector<std::vector<OpFamily>>& families, const OpHeads& heads,
                           const OpHeads* tails, int rank) {
  std::vector<Job> jobs = rank_jobs_deferring_freely(problem, families, heads, tails, rank);
  if (tails) limit_deferred_weights(problem, rank, jobs);
  return jobs;
}

// The rank's R ops as one job (with_recompute_time), its duration left for the makespan to set.
Job recompute_job(const Problem& problem, const std::vector<std::vector<OpFamily>>& families,
                  const OpHeads& heads, int rank) {
  Job recompute{kInfinity, 0, kInfinity};
  for (int s : problem.stages_of_rank(rank)) {
    if (!problem.recompute_frees_memory(s)) continue;
    const StageCosts& cost = problem.stages[s];
    const OpFamily& backward = families[s][1];  // F, B, W
    recompute.head = std::min(recompute.head, heads.forward[s][0] + cost.forward);
    recompute.tail = std::min(recompute.tail,
                              cost.backward_input + std::max(backward.tail_via_stage_zero.at(0),
                                                             backward.tail_via_own_weight.at(0)));
  }
  return recompute;
}

// The relaxation of a problem: its op families, their heads from the dependencies alone, and
// the bound at heads paced by memory.
class Relaxation {
 public:
  // `stop` ends each pacing early (bounds/paced_heads.h): the bounds stay valid, only lower.
  Relaxation(const Problem& problem, std::function<bool()> stop)
      : problem_(problem),
        stop_(std::move(stop)),
        paths_(microbatch_paths(problem)),
        families_(op_families(problem, paths_)),
        tails_(paced_tails(problem, stop_)) {
    for (const std::vector<OpFamily>& stage : families_) {
      for (size_t type = 0; type < kHeadsOfType.size(); ++type) {
        std::vector<double>& family_heads =
            (unpaced_.*kHeadsOfType[type]).emplace_back(problem.microbatches);
        for (int k = 0; k < problem.microbatches; ++k) family_heads[k] = stage[type].head.at(k);
      }
    }
    for (int r = 0; r < problem.ranks; ++r) {
      unpaced_bound_ =
          std::max(unpaced_bound_,
                   jackson_preemptive_bound(rank_jobs(problem, families_, unpaced_, nullptr, r)));
      needs_.push_back(rank_memory_need(problem, paths_, r));
    }
    paced_ = paced_heads(problem, unpaced_, kInfinity, &settled_, {}, stop_);
  }

  // Where the pacing for schedules that end by a makespan starts. The heads paced for every
  // makespan hold in those schedules too, and starting from them takes a third to a half of the
  // time at R = 32, m = 256 for the same bounds (docs/semantics.md). Where they did not settle,
  // they crept up to the round cap (as on a budget that no schedule fits), and pacings from them
  // would creep on for as long: these start from the unpaced heads.
  const OpHeads& start_for_makespans() const { return settled_ ? paced_ : unpaced_; }

  // The bound with the heads paced for schedules that end by `makespan` (bounds/paced_heads.h).
  // Its source: kRecomputeTime where the R time raises it above the ranks' F, B and W jobs alone,
  // else kDeferredWeights where the Ws that memory keeps from waiting raise those above the same
  // jobs free to defer them, else kMemoryPacing where their paced heads raise it above their
  // unpaced ones.
  LowerBound paced_bound(double makespan = kInfinity) const {
    const OpHeads heads = makespan == kInfinity ? paced_
                                                : paced_heads(problem_, start_for_makespans(),
                                                              makespan, nullptr, {}, stop_);
    double jobs_alone = 0;
    double deferring_freely = 0;
    double bound = 0;
    for (int r = 0; r < problem_.ranks; ++r) {
      std::vector<Job> jobs = rank_jobs_deferring_freely(problem_, families_, heads, &tails_, r);
      deferring_freely = std::max(deferring_freely, jackson_preemptive_bound(jobs));
      limit_deferred_weights(problem_, r, jobs);
      double rank = jackson_preemptive_bound(jobs);
      jobs_alone = std::max(jobs_alone, rank);
      const RankMemoryNeed& need = needs_[r];
      if (need.recomputes() && need.area.per_time > 0) {
        rank = with_recompute_time(std::move(jobs), recompute_job(problem_, families_, heads, r),
                                   need, rank);
      }
      bound = std::max(bound, rank);
    }
    auto raised = [](double value, double without) {
      return value > without * (1 + kSameSumMargin);
    };
    if (raised(bound, jobs_alone)) return {bound, BoundSource::kRecomputeTime};
    if (raised(bound, deferring_freely)) return {bound, BoundSource::kDeferredWeights};
    return {bound,
            raised(bound, unpaced_bound_) ? BoundSource::kMemoryPacing : BoundSource::kSequencing};
  }

  // Where ranks can recompute, the pacing above lets any number of a rank's activations be held
  // as their checkpoint, and R time counts only as the memory's area needs it. Let ρ be the most
  // activations rank r holds as their checkpoint at once: r runs at least ρ Rs (one per
  // activation held so), and the heads paced with r capped at ρ (the other ranks not capped)
  // hold, so r's jobs and ρ of its shortest R bound the makespan; the least of that over ρ is
  // r's bound, and the largest over the ranks bounds every schedule. With no cap and an R for
  // each of its activations a rank's jobs give at most its bound, M: the ranks are taken from the
  // highest M down while it is above the bound so far (rank_bound).
  double checkpoint_bound(double known) const {
    const int ranks = problem_.ranks;
    std::vector<std::pair<double, int>> candidates;  // (at most the rank's bound, rank)
    double largest = 0;
    int above = 0;
    for (int r = 0; r < ranks; ++r) {
      if (shortest_recompute(r) == kInfinity) continue;
      candidates.emplace_back(with_recomputes(start_for_makespans(), r, activations_of_rank(r)), r);
      largest = std::max(largest, candidates.back().first);
      above += candidates.back().first > known;
    }
    // Where more than a few ranks would take a pacing each, one pacing with every rank capped at
    // 0, which paces each rank's heads at least as late as its own cap of 0, sorts most of them
    // out. (Paced for every makespan instead of `largest` it settles sooner but lowers bounds:
    // R = 4, m = 8 recompute at 75% on the V-shape 966.5 -> 949.0.)
    if (above > kFewRanks) {
      const OpHeads strictest = paced_heads(problem_, start_for_makespans(), largest, nullptr,
                                            CheckpointCaps(ranks, CheckpointCap{0, 0}), stop_);
      for (auto& [at_most, r] : candidates) {
        at_most = std::min(at_most, with_recomputes(strictest, r, 0));
      }
    }
    std::sort(candidates.rbegin(), candidates.rend());
    double bound = known;
    for (const auto& [at_most, r] : candidates) {
      if (at_most <= bound) break;
      bound = std::max(bound, rank_bound(r, at_most, bound));
    }
    return bound;
  }

 private:
  // Rank r's bound (checkpoint_bound), at most `at_most`, where it is above `bound`: the larger
  // of the ladder over ρ and the same split at the ramp-up.
  double rank_bound(int r, double at_most, double bound) const {
    int least_low = 0;
    const double least = ladder_bound(r, at_most, bound, least_low);
    // On a rank of one stage the split is at its first F, and every R comes after it anyway.
    if (problem_.stages_of_rank(r).size() < 2) return least;
    return std::max(least, split_bound(r, at_most, std::max(least, bound), least_low));
  }

  // ρ is tried in ranges (kRangeGrowth): within one, the pacing for its largest ρ and the R time
  // of its smallest hold, so one pacing per range. Each pacing is for schedules that end by the
  // least so far (any other ends later), and the ranges end once their estimate reaches that
  // least, or it is at most `bound`. The estimate: the heads paced for every makespan with no cap
  // come no later than any pacing here, so the rank's jobs at them bound each pacing's result
  // from below. `least_low` is set to the low end of the range that gave the least.
  double ladder_bound(int r, double at_most, double bound, int& least_low) const {
    const OpHeads& uncapped = start_for_makespans();
    CheckpointCaps caps(problem_.ranks);
    double least = at_most;
    for (int low = 0, next = 1; least > bound;
         low = next, next += std::max(1, next / kRangeGrowth)) {
      // The estimate grows with the Rs: once it reaches the least, so do all later ranges'.
      if (with_recomputes(uncapped, r, low) >= least) break;
      const int cap = capped(r, next - 1);
      caps[r] = {cap, cap};
      const double range =
          with_recomputes(paced_heads(problem_, uncapped, least, nullptr, caps, stop_), r, low);
      if (range < least) least = range, least_low = low;
      if (cap == kAnyCheckpoints) break;
    }
    return least;
  }

  // The split at a moment τ, the start of the rank's last stage's first F at its uncapped head:
  // with ρ₁ the most checkpoints at F starts before τ and ρ₂ at the others, the heads paced with
  // those caps hold, the ρ₂ activations held from τ on are recomputed after τ, and the rank runs
  // at least max(ρ₁, ρ₂) Rs. Where the ramp-up needs a checkpoint at its end and the steady state
  // another much later, one R cannot fill the ramp-up's idle time and serve both unless it waits
  // until the later. ρ₁ and ρ₂ are each tried in the ranges of kSplitLows, each pacing for
  // schedules that end by the least so far, skipping the pairs whose estimate (as in
  // ladder_bound) reaches it; 0 once it is within `above`, which the split then cannot raise.
  double split_bound(int r, double at_most, double above, int least_low) const {
    const OpHeads& uncapped = start_for_makespans();
    const double split = uncapped.forward[problem_.stages_of_rank(r).back()][0];
    const size_t last = kSplitLows.size() - 1;
    // The rank's jobs at `heads` with the Rs of the counts `until` and `after` (indices in
    // kSplitLows).
    auto split_jobs = [&](const OpHeads& heads, size_t until, size_t after) {
      const int low_until = kSplitLows[until];
      const int low_after = kSplitLows[after];
      return with_recomputes(heads, r, low_after, split, std::max(0, low_until - low_after));
    };
    // The same at the heads paced with those caps for schedules that end by `makespan`.
    CheckpointCaps caps(problem_.ranks);
    auto split_value = [&](size_t until, size_t after, double makespan) {
      auto cap = [&](size_t k) {
        return k < last ? capped(r, kSplitLows[k + 1] - 1) : kAnyCheckpoints;
      };
      caps[r] = {cap(until), cap(after), split};
      return split_jobs(paced_heads(problem_, uncapped, makespan, nullptr, caps, stop_), until,
                        after);
    };
    auto within_above = [&](double value) { return value <= above * (1 + kSameSumMargin); };
    // Two probes, paced for schedules that end by `above`, most often find the split no higher:
    // the least's range before τ with no checkpoint after it, and any number with the most Rs
    // after it. Were one within `above`, the search below would reach it there too (its pacings
    // are for makespans above `above`, which only lowers their result), so it can stop at once.
    const size_t least_row =
        std::upper_bound(kSplitLows.begin(), kSplitLows.end(), least_low) - kSplitLows.begin() - 1;
    if (within_above(split_value(least_row, 0, above)) ||
        within_above(split_value(last, last, above))) {
      return 0;
    }
    double least = at_most;
    for (size_t i = 0; i <= last; ++i) {
      for (size_t j = 0; j <= last; ++j) {
        if (within_above(least)) return 0;
        if (split_jobs(uncapped, i, j) >= least) continue;  // the estimate
        least = std::min(least, split_value(i, j, least));
      }
    }
    return least;
  }

  // A cap of `high` checkpoints on the rank, any number where it has no more activations.
  int capped(int rank, int high) const {
    return high >= activations_of_rank(rank) ? kAnyCheckpoints : high;
  }

  // The least makespan of the rank's jobs at these heads, with `count` of its shortest R, none of
  // them starting before `from`, and `more` of them anywhere.
  double with_recomputes(const OpHeads& heads, int rank, int count, double from = 0,
                         int more = 0) const {
    std::vector<Job> jobs = rank_jobs(problem_, families_, heads, &tails_, rank);
    for (const auto& [n, earliest] : {std::pair{count, from}, std::pair{more, 0.0}}) {
      if (n == 0) continue;
      Job recompute = recompute_job(problem_, families_, heads, rank);
      recompute.head = std::max(recompute.head, earliest);
      recompute.duration = n * shortest_recompute(rank);
      jobs.push_back(recompute);
    }
    return jackson_preemptive_bound(std::move(jobs));
  }

  int activations_of_rank(int rank) const {
    return problem_.microbatches * static_cast<int>(problem_.stages_of_rank(rank).size());
  }

  // The rank's shortest R among its stages that recompute; infinite where none does.
  double shortest_recompute(int rank) const {
    double shortest = kInfinity;
    for (int s : problem_.stages_of_rank(rank)) {
      if (problem_.recompute_frees_memory(s)) {
        shortest = std::min(shortest, problem_.stages[s].recompute_forward);
      }
    }
    return shortest;
  }

  const Problem& problem_;
  const std::function<bool()> stop_;
  const MicrobatchPaths paths_;
  const std::vector<std::vector<OpFamily>> families_;
  const OpHeads tails_;  // of F and B, paced by memory
  OpHeads unpaced_;
  OpHeads paced_;  // for every makespan
  bool settled_ = false;
  double unpaced_bound_ = 0;           // the ranks' F, B and W jobs at their unpaced heads
  std::vector<RankMemoryNeed> needs_;  // per rank, for the R time
};

// Where the pacing counts offloads that their reloads could not bring back in time: the least
// makespan C* whose paced bound B(C), with no more activations away than come back by C, is
// within C. B falls as C grows (more can come back, and later stages' Fs can start later), so
// bisect from `bound` up to the pacing without offloads (C = 0). C* is at least the failing end,
// and at least B(fitting end): C* is at most that end, so B(C*) >= B(fitting end). The latter is
// exact where B is flat around C*.
// Where C* is at most `known`, a bound held elsewhere, `bound` is returned as it is. Once `stop`
// says so, the bisection ends where it is: C* is at least its failing end at every step.
LowerBound with_reloads_by_the_end(const Relaxation& relaxation, LowerBound bound, double known,
                                   const std::function<bool()>& stop) {
  const double from = std::max(bound.value, known);
  if (relaxation.paced_bound(from).value <= from) return bound;
  double failing = from;
  double fitting = relaxation.paced_bound(0).value;
  while (fitting - failing > kBisectionPrecision * fitting) {
    if (stop && stop()) return higher(bound, {failing, BoundSource::kMemoryPacing});
    const double mid = (failing + fitting) / 2;
    (relaxation.paced_bound(mid).value <= mid ? fitting : failing) = mid;
  }
  return {std::max(failing, relaxation.paced_bound(fitting).value), BoundSource::kMemoryPacing};
}

}  // namespace

LowerBound sequencing_bound(const Problem& problem, double known,
                            const std::function<bool()>& stop) {
  const Relaxation relaxation(problem, stop);
  LowerBound bound = relaxation.paced_bound();
  if (problem.any_stage_can_recompute()) {
    bound = higher(bound, {relaxation.checkpoint_bound(bound.value), BoundSource::kRecomputeTime});
  }
  if (problem.offload) bound = with_reloads_by_the_end(relaxation, bound, known, stop);
  // The simulator adds the same durations in another order: round down past the last bits in
  // which the two sums may differ, so a schedule that meets the bound never falls below it.
  bound.value *= 1 - kRoundingMargin;
  return bound;
}

}  // namespace optpipe
