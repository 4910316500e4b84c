// Memory-aware Zero Bubble generators (docs/methods.md): the Zero Bubble greedy under the profile's
// memory budget, and the V-shape family ZB-V, V-Half and V-Min. Each returns an order whose
// simulated schedule stays within Problem::budget_bytes on every rank whenever its leanest
// variant fits, and otherwise its leanest order (the compile driver then reports the peak).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

// Zero Bubble "automatic scheduling" (Qi et al., ICLR 2024) under the budget: memory-limited list
// scheduling over the combinations of its binary choices, keeping the fastest order within budget.
Order zb_auto_order(const Problem& problem);

// V-shape placement, two chunks per rank (Qi et al., NeurIPS 2024), each held to the budget when
// it is lower than its own peak. ZB-V: the memory-limited list scheduler with R microbatches'
// worth of each rank's two chunks (1F1B's peak). V-Half and V-Min: the paper's repeating building
// blocks (heuristics/vshape_patterns.h), 2(floor(R/2)+1) and 2 ceil((R+1)/3) chunk activations on
// uniform stages, or the list scheduler held to that peak when it is faster.
Order zb_v_order(const Problem& problem);
Order v_half_order(const Problem& problem);
Order v_min_order(const Problem& problem);

// The fastest order among the list scheduler's policy choices whose simulated schedule validates
// (memory included) with `activation_limit_bytes` per rank as the list scheduler's limit; when none
// fits the budget, the one that overshoots it least.
Order best_memory_limited_order(const Problem& problem,
                                const std::vector<int64_t>& activation_limit_bytes);

// The fastest candidate (the first on ties) whose live activation bytes stay within `limits` per
// rank and whose simulated schedule validates; the first candidate when none does. Candidates is
// not empty.
Order fastest_within(const Problem& problem, std::vector<Order> candidates,
                     const std::vector<int64_t>& limits);

std::string needs_vshape(const Problem& problem);

}  // namespace optpipe
