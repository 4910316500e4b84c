// Least times between the ops of one microbatch, from the dependencies alone (docs/semantics.md,
// Dependencies). The makespan lower bounds (timing/metrics.h, bounds/memory_bound.h) are
// built on them.
#pragma once

#include <vector>

#include "model/problem.h"

namespace optpipe {

// Per stage s, the same for every microbatch j. A fused BW, a reload or a recompute before a
// backward only lengthens these paths, so they hold for every schedule.
struct MicrobatchPaths {
  // Least time from F(0, j) start to F(s, j) start: the forwards and hand-offs before stage s.
  std::vector<double> forward_offset;
  // Least time from F(s, j) start to B(s, j) end: forwards down to the last stage, backwards
  // back up to s. L(s) in docs/semantics.md.
  std::vector<double> round_trip;
  // Least time from B(s, j) start to the end of W(0, j): backwards down to stage 0, then its W.
  std::vector<double> backward_tail;
  // Least time from F(s, j) start to the end of W(0, j): round_trip up to B(s, j)'s start, then
  // backward_tail.
  std::vector<double> forward_tail;
};

MicrobatchPaths microbatch_paths(const Problem& problem);

}  // namespace optpipe
