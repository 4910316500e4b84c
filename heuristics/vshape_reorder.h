// V-Half and V-Min as their authors build them (Qi et al., "Pipeline Parallelism with
// Controllable Memory", NeurIPS 2024, the runtime's greedy reordering): the building block of
// heuristics/vshape_patterns.h repeated over the microbatches, then two greedy passes in unit
// slots. The first moves every warm-up and cool-down op, Ws included, to the earliest free slot
// after its dependencies that keeps the rank's peak (counted in chunk activations, each held from
// its F to its W) at most the pattern's; the second drops the Ws and moves the cool-down again with
// Ws filling free slots. Each pass ends by starting every op as early as its dependencies allow in
// unit time. Ws then take the free slots, the up chunk's first.
#pragma once

#include <optional>

#include "heuristics/vshape_patterns.h"
#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

// Needs the V-shape placement with two chunks per rank. nullopt where the passes find no
// consistent slot for an op (does not happen on the paper's patterns; kept as a value, not a throw).
std::optional<Order> vshape_reordered_pattern_order(const Problem& problem, VShapePattern pattern);

}  // namespace optpipe
