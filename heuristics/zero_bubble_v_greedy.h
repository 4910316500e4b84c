// ZB-V as its authors build it (Qi et al., "Pipeline Parallelism with Controllable Memory",
// NeurIPS 2024, §5): a greedy over the V-shape placement with two chunks per rank. The warm-up
// fills each rank with first-chunk Fs while its memory allows and the second chunk's F has not come
// back (rank r holds up to 2r + 2 chunk activations beyond what it runs); the steady phase then
// alternates one B and one F per rank, choosing the chunk whose input is ready, and runs Ws where
// the gap before an op is at least a W, where the bubble rule asks, and whenever memory is short.
// It repeats with each rank's bubble as the bubble it may approve while that lowers the largest.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

// The heuristic's two binary choices; the paper tries all four and keeps the fastest.
struct ZeroBubbleVChoices {
  bool fill_f = false;  // a W fills a gap before an F beyond what the bubble rule allows
  bool fill_b = false;  // the same before a B of the first chunk
};

// One run under `max_live_bytes[rank]` activation bytes per rank. nullopt where the run cannot
// keep within that limit or its choices starve a rank. Needs the V-shape placement with two chunks
// per rank.
std::optional<Order> zero_bubble_v_greedy_order(const Problem& problem,
                                                const std::vector<int64_t>& max_live_bytes,
                                                const ZeroBubbleVChoices& choices);

// The fastest of the four runs by the simulator's makespan (the first on ties); nullopt when none
// fits.
std::optional<Order> best_zero_bubble_v_greedy_order(const Problem& problem,
                                                     const std::vector<int64_t>& max_live_bytes);

}  // namespace optpipe
