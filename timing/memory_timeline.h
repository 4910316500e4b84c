// Live activation memory of one rank over time (docs/design.md §3): allocation at an op's start,
// release at its end; at equal times the releases of ops that have ended come first, as a caching
// allocator reuses a block freed by an op that has ended, and those of ops of no duration last.
#pragma once

#include <cstdint>
#include <vector>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

// What one action does to its rank's live bytes: an allocation at its start, a release at its end.
struct MemoryEffect {
  int64_t allocated_at_start = 0;
  int64_t released_at_end = 0;
};

// `transfer_bytes` is what an OFFLOAD or RELOAD moves; `recomputed` whether the action's
// activation is recomputed (its F then keeps only the checkpoint bytes after it ends).
MemoryEffect memory_effect(const Problem& problem, const OpRef& ref, int64_t transfer_bytes,
                           bool recomputed);

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
