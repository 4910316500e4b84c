// The V-shape schedules of controllable memory as their authors search for them (Qi et al.,
// "Pipeline Parallelism with Controllable Memory", NeurIPS 2024, §3 and Appendix A; their
// v_auto_schedule): every building block whose first rank's pattern and whose uniform offsets
// between ranks keep the peak within the memory limit, each repeated over the microbatches, then
// squeezed, its warm-up and cool-down rebuilt to the paper's shape and its bubbles filled greedily
// without raising the peak. Memory is counted in chunk activations, each held from its F to its W.
// Among the candidates, the fastest by the simulator's makespan.
#pragma once

#include <optional>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

// Needs the V-shape placement with two chunks per rank; `max_chunk_activations` is the limit per
// rank (at most 2R, 1F1B's). nullopt where no building block fits the limit. The search grows
// with R²(4R + m) and the limit; past a fixed amount of work (about a second) it keeps the best
// block so far, so large pipelines get a partial search, the same on every machine.
std::optional<Order> vshape_auto_order(const Problem& problem, int max_chunk_activations);

// How many chunk activations every rank's budget holds (its largest chunk's bytes each).
int chunk_activations_within_budget(const Problem& problem);

}  // namespace optpipe
