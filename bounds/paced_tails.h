// Tails of the sequencing bound (bounds/sequencing_bound.h) paced by memory, the heads' mirror
// (docs/semantics.md, The sequencing bound): read backwards in time, a schedule is one in which
// each B allocates its activation, W's G included, and each F releases it, so the pacing of heads
// (bounds/paced_heads.h) on that mirrored problem gives how long before the end each B and F
// must end for the activations still held then to fit.
#pragma once

#include <functional>

#include "bounds/op_heads.h"
#include "model/problem.h"

namespace optpipe {

// Per stage, the least time from the end of its k-th F and B from the last (k from 0) to the
// schedule's end: [stage][k] in `forward` and `backward`, non-decreasing in k; `weight` is left
// empty. Every schedule within the budget leaves at least this much after them.
// `stop`: as for paced_heads (bounds/paced_heads.h): tails paced so far hold.
OpHeads paced_tails(const Problem& problem, const std::function<bool()>& stop = nullptr);

}  // namespace optpipe
