// What the simulator (timing/simulator.h) and the previous timing it re-uses
// (timing/previous_timing.h) both need to know of a change to an order.
#pragma once

#include <cstddef>

namespace optpipe {

// How an order differs from the one a previous timing came from (the local search's moves:
// solver/local_search.h).
struct OrderRevision {
  // What the change moves starts at this time or later in both timings, and what starts earlier
  // holds the same memory as before: it is copied from the previous timing, not timed again.
  double unchanged_before = 0;
  // When the lists hold the same actions as before and differ only in positions [first, last) of
  // `rank`'s list (the new one's positions): once the new timing has run those and agrees with the
  // previous one on every action that starts before some moment, it copies the rest too (the
  // simulation is then in the same state). -1 when the actions themselves changed.
  int rank = -1;
  size_t first = 0;
  size_t last = 0;
};

}  // namespace optpipe
