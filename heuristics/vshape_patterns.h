// The repeating building blocks of V-Half and V-Min (Qi et al., "Pipeline Parallelism with
// Controllable Memory", NeurIPS 2024): on the V-shape placement each rank repeats, every six unit
// slots, F of its first chunk, F of its second, B of its second, B of its first at fixed offsets;
// Ws take the free slots. The slots give a topological order of every op; the simulator times it
// as soon as possible, so it stays valid with any costs. A rank's memory depends only on its own
// order, so the peak in chunk activations is that of the pattern whatever the costs.
#pragma once

#include <array>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

enum class VShapePattern { kHalf, kMin };

// The slot of microbatch 0's F of the down chunk, F of the up chunk, B of the up chunk and B of
// the down chunk on rank r (the paper's stable patterns; microbatch j adds 6j). The offsets keep
// the four kinds in distinct slots modulo 6.
std::array<int, 4> vshape_pattern_first_slots(VShapePattern pattern, int ranks, int r);

// Needs vshape placement with two chunks per rank. `squeeze` moves warm-up and cool-down ops to
// earlier free slots where the rank's peak does not grow (the paper's squeeze, one pass).
Order vshape_pattern_order(const Problem& problem, VShapePattern pattern, bool squeeze);

}  // namespace optpipe
