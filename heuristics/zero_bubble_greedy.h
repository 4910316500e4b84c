// The Zero Bubble paper's own greedy (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024,
// §3 "automatic scheduling", its heuristic before the ILP) for one chunk per rank, followed
// step by step: microbatch by microbatch, each stage decides whether to run another F, fills the
// time until its input arrives with pending Ws where the bubble rule allows, and runs Ws whenever
// the next F would not fit its memory limit. It times ops with the paper's model (an op starts
// when its rank is free and its input has crossed the link), which is the simulator's.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

// The heuristic's three binary choices; the paper tries all eight and keeps the fastest.
struct ZeroBubbleGreedyChoices {
  bool allow_bubble_before_first_b = false;  // warm-up Fs may end after the first B's input comes
  bool prioritize_b = false;  // a stage two Fs ahead of the next holds its F while B is near
  bool no_bubble_greedy = false;  // a W fills a gap the bubble rule would leave idle
};

// One run under `max_live_bytes[rank]` activation bytes on each rank. nullopt where
// that run cannot fit its memory limit (no W left to free room) or its choices starve a stage.
// Needs one chunk per rank.
std::optional<Order> zero_bubble_greedy_order(const Problem& problem,
                                              const std::vector<int64_t>& max_live_bytes,
                                              const ZeroBubbleGreedyChoices& choices);

// The fastest of the eight runs by the simulator's makespan (the first on ties); nullopt when
// none fits.
std::optional<Order> best_zero_bubble_greedy_order(const Problem& problem,
                                                   const std::vector<int64_t>& max_live_bytes);

}  // namespace optpipe
