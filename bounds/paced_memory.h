// The memory of one rank as the pacing of bounds/paced_heads.h sees it, and the counting that
// the pacing of a rank and of a link group share (docs/semantics.md, The sequencing bound).
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <optional>
#include <vector>

#include "bounds/microbatch_paths.h"
#include "bounds/op_heads.h"
#include "model/problem.h"

namespace optpipe::pacing {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// The i-th offload to end (from 0) on one channel moves the activation of one of the Fs from the
// i-th on (`forwards`: their heads, sorted), after that F ends, and the channel moves one at a
// time: [i] is the earliest it can end.
std::vector<double> offload_ends(const std::vector<double>& forwards, double shortest_forward,
                                 double offload_time);

// How many of `ends` (sorted) are at most `time`.
int ended_by(const std::vector<double>& ends, double time);

// The first of `moments` (sorted) after `head` at which `fits` holds, if any. Where `fits`, once
// true, stays true (`monotone`), found by bisection; else each moment is tried in turn: in
// schedules of a given makespan, fewer activations can be away later, so a check may fail again
// after it held, and bisection could skip the first moment that fits.
template <typename Fits>
std::optional<double> first_fit_after(const std::vector<double>& moments, double head,
                                      bool monotone, const Fits& fits) {
  auto first = std::upper_bound(moments.begin(), moments.end(), head);
  if (monotone) {
    first = std::partition_point(first, moments.end(), [&](double t) { return !fits(t); });
  } else {
    first = std::find_if(first, moments.end(), fits);
  }
  if (first == moments.end()) return std::nullopt;
  return *first;
}

// The activations a check counts on one rank, per stage in model order: how many are allocated,
// how many of those can be offloaded or past their B or W, and how many of these last can be past
// their B.
struct Counted {
  std::vector<int> allocated;
  std::vector<int> releasable;
  std::vector<int> backward_at_most;
};

// The memory of one rank as the pacing sees it, from the heads of the current round, in
// schedules of at most `makespan` in which the rank holds no more activations as their checkpoint
// at once than `checkpoints` allows.
class RankMemory {
 public:
  RankMemory(const Problem& problem, const MicrobatchPaths& paths, int rank, const OpHeads& heads,
             double makespan, const CheckpointCap& checkpoints);

  // The earliest moment from `head` on at which the k-th F of the rank's c-th stage fits. Where
  // nothing released by the heads makes it fit, no schedule fits the budget; the last release
  // then keeps the bound from falling as the budget does.
  double earliest_fit(size_t c, int k, double head) const;

  // At the k-th F of the rank's c-th stage: k + 1 activations of each of its first c stages, the
  // F's own included (which no release can have freed).
  Counted at_forward(size_t c, int k) const;
  // The k-th F of the rank's c-th stage starts after the Fs of its later stages that must come
  // first (forwards_before_) have ended, one op at a time: the least such start.
  double after_forwards_first(size_t c, int k) const;
  // At the k-th F of `stage` on another rank: k + 1 activations of each of this rank's stages
  // before it, which those microbatches passed first.
  Counted before_stage(int stage, int k) const;

  static constexpr int kNoneFits = std::numeric_limits<int>::max();

  // The fewest activations away at `time` with which `counted` fits the budget; kNoneFits where
  // no number the rank's channel can have moved by then makes it fit.
  int offloads_needed(const Counted& counted, double time) const;

  bool moves() const { return moved_ > 0; }
  // Whether a check that holds at some moment holds at every later one, so that the first moment
  // that fits can be found by bisection (first_fit_after).
  bool fits_stay() const { return makespan_ == kInfinity && checkpoints_.never_falls(); }
  const std::vector<double>& moments() const { return moments_; }
  const std::vector<double>& forward_heads() const { return forwards_; }  // sorted
  double shortest_forward() const { return shortest_forward_; }
  double offload_time() const { return offload_time_; }
  double reload_time() const { return reload_time_; }
  double after_reload() const { return after_reload_; }

 private:
  // Of the activations `counted` holds of the rank's i-th stage, how many can be past their B and
  // past their W at `time`.
  struct Released {
    int counted = 0;
    int backwards = 0;
    int weights = 0;
  };
  Released released(const Counted& counted, size_t i, double time) const;

  // Per stage that can offload: the earliest end of its i-th offload (offload_ends of its own F
  // heads and offload time) and what each moves, O.
  struct StageOffloads {
    std::vector<double> ends;
    double bytes_each = 0;
  };

  // At the k-th F of the rank's c-th stage: k + 1 activations of each of its first c stages.
  Counted through(size_t c, int k) const;

  // Fills forwards_before_.
  void count_forwards_before();

  // The latest the j-th F of the rank's i-th stage can start in a schedule of the makespan.
  double latest_forward(size_t i, int j) const;

  // Whether `counted` can fit at some moment from `from` to `to`: checked at the first
  // kExactMoments moments, the rest relaxed into one check.
  bool fits_by(const Counted& counted, double from, double to) const;
  static constexpr int kExactMoments = 16;

  // Whether `counted` fits at `time`, with as many activations away as can be.
  bool fits(const Counted& counted, double time) const;

  // Offloads ended by `time` that can still be away: not yet reloading.
  int available_away(double time) const;

  // What `counted` holds at `time` with no activation away, and how many of its activations an
  // offload can have moved: those not past their B. Computed once for the several counts away
  // that a check tries.
  struct Holding {
    const Counted& counted;
    double time;
    double bytes = 0;
    int movable = 0;
    int others = 0;       // the activations counted, less the F's own
    int checkpoints = 0;  // the most of them held as their checkpoint
    double moved = 0;     // the most the rank's offloads can have moved by then (moved_by)
  };
  Holding holding_at(const Counted& counted, double time) const;

  // The least bytes it can hold with `away` activations offloaded.
  double held(const Holding& holding, int away) const;

  static constexpr int kUncapped = std::numeric_limits<int>::max();

  // How many activations can be away (offloaded, not yet reloading) at `time`.
  int away_at_most(double time) const;

  // The most bytes the rank's offloads can have moved by `time`: each stage's i-th offload ends
  // no earlier than stage_offloads_ says, whatever the other stages' offloads do.
  double moved_by(double time) const;

  // What a B of the rank's i-th stage frees: A - G.
  double after_backward(size_t i) const;

  const Problem& problem_;
  const MicrobatchPaths& paths_;
  const OpHeads& heads_;
  const std::vector<int> stages_;  // model order
  const double budget_;
  const double makespan_;
  double moved_ = 0;                  // the most an offload frees
  const CheckpointCap checkpoints_;   // held as their checkpoint at once, at most
  double checkpointed_ = 0;           // the most a recompute frees: A - C
  double reload_time_ = kInfinity;    // the least of the rank's reloads
  double after_reload_ = kInfinity;   // least time from a reload's end to the schedule's end
  std::vector<double> offloads_end_;  // the i-th offload to end ends no earlier than [i]
  std::vector<double> moments_;       // when a release can happen
  std::vector<size_t> swap_order_;    // the rank's stages by what a B frees, least first
  std::vector<double> forwards_;      // the heads of the rank's Fs, sorted
  // [c][i][k] for stages c < i: how many Fs of the i-th stage start before the k-th F of the c-th,
  // in schedules of at most the makespan (none counted where every activation could be away)
  std::vector<std::vector<std::vector<int>>> forwards_before_;
  double shortest_forward_ = kInfinity;
  std::vector<StageOffloads> stage_offloads_;
  double offload_time_ = kInfinity;  // the least of the rank's offloads
};

}  // namespace optpipe::pacing
