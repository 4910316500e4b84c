// The part of a schedule the MILP re-decides (docs/solver.md). Per rank, the order is split into
// prefix | segment | suffix. Prefix ops keep their order and times; segment ops are reordered and
// retimed by the MILP; suffix ops keep their order and are retimed by the simulator afterwards.
// Whole orders are the segment when the problem is small enough to solve at once.
#pragma once

#include <vector>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

struct Segment {
  std::vector<size_t> begin;  // per rank: first position of the segment in the rank's order
  std::vector<size_t> end;    // per rank: one past its last position
  size_t size() const;
};

// The positions of microbatches [first_mb, first_mb + count) on every rank, widened until no
// prefix op depends on a segment or suffix op and no segment op depends on a suffix op, so any
// order the MILP picks for the segment keeps the whole order free of deadlock.
Segment microbatch_band(const Problem& problem, const Order& order, int first_mb, int count);

// Everything.
Segment whole_order(const Order& order);

}  // namespace optpipe
