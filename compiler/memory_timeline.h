// Live activation memory of one rank over time (DESIGN.md §3): allocation at an op's start,
// release at its end; at equal times releases come first, as a caching allocator reuses a block
// freed by an op that has ended.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/problem.h"
#include "compiler/schedule.h"

namespace optpipe {

struct MemoryStep {
  double time;
  int64_t live_bytes;  // activation bytes live right after this step (static bytes excluded)
  OpRef cause;         // the op whose start or end changed the live bytes
};

// Steps in time order, one per allocation or release.
std::vector<MemoryStep> memory_timeline(const Problem& problem, const std::vector<Action>& actions);

// Highest live activation bytes of a timeline (0 when empty).
int64_t peak_live_bytes(const std::vector<MemoryStep>& timeline);

}  // namespace optpipe
