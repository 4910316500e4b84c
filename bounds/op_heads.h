// The heads of the sequencing bound (bounds/sequencing_bound.h): per stage, the least start of
// each F, B and W in every schedule within the budget, and the checkpoint caps a pacing assumes.
// Shared by the raisings (bounds/paced_heads.h, bounds/rank_load_heads.h) and the tails
// (bounds/paced_tails.h).
#pragma once

#include <limits>
#include <vector>

namespace optpipe {

inline constexpr int kAnyCheckpoints = std::numeric_limits<int>::max();

// The most activations a rank may hold as their checkpoint at once (recomputed: from the end of
// their F to the start of their R) at an F's start, where a pacing assumes a cap: `until_split`
// at F starts before `split`, `after_split` at the others.
struct CheckpointCap {
  int until_split = kAnyCheckpoints;
  int after_split = kAnyCheckpoints;
  double split = std::numeric_limits<double>::infinity();

  int at(double time) const { return time < split ? until_split : after_split; }
  // Whether an F that fits at some moment fits at every later one as far as the caps go.
  bool never_falls() const { return after_split >= until_split; }
};
// Per rank; empty: any number on every rank.
using CheckpointCaps = std::vector<CheckpointCap>;

// Per stage, the least start of its k-th F, B and W (k from 0, in start order), from the
// schedule's first start: [stage][k], non-decreasing in k.
struct OpHeads {
  std::vector<std::vector<double>> forward;
  std::vector<std::vector<double>> backward;
  std::vector<std::vector<double>> weight;
};

}  // namespace optpipe
