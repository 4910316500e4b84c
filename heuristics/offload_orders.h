// Compute-only orders the offload generators start from (docs/methods.md): grouped interleaved
// 1F1B (PipeOffload) and microbatch-serial (the leanest order there is).
#pragma once

#include <vector>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

// Interleaved 1F1B with microbatches in groups of `group_size` (the last group may be partial):
// per rank, forwards group by group, chunk by chunk; backwards likewise with the chunks
// reversed; `warmup[r]` forwards first, then one forward and one backward alternately. With
// `split`, each backward is B immediately followed by its W, else a fused BW.
Order grouped_interleaved_order(const Problem& problem, int group_size,
                                const std::vector<int>& warmup, bool split);

// Megatron-LM's warm-up for a group size g: (v-1)g + floor(extra_per_rank * (R-1-p)) forwards,
// where p is the rank's position (the stage index of its first chunk); Megatron's is extra 2.
std::vector<int> interleaved_warmup(const Problem& problem, int group_size, double extra_per_rank);

// One microbatch at a time: all its forwards, then its backwards. Deadlock-free on any placement
// and holds one activation per chunk; the fallback when nothing denser fits.
Order microbatch_serial_order(const Problem& problem, bool split);

}  // namespace optpipe
