// List orders for a plan that recomputes every activation of the stages that can (docs/methods.md,
// AdaOffload). Such an activation holds only its checkpoint C between its F and its R, so many
// more forwards fit than the memory-limited orders admit, at T_R per activation. Where memory,
// not compute, holds a long pipeline back (many stages per microbatch's round trip, room for few
// whole activations), these orders are several times denser. Recompute fitted onto a finished
// order (heuristics/offload_placement.h) starts from that order's density instead: where no order
// is dense to begin with, as without a link, only these find it.
#pragma once

#include <optional>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

// `problem` as the list scheduler should see that plan: a recomputed activation counts
// max(C, G) from its F to its B (its checkpoint, or the G its B leaves), its R's time joins its
// B's, and each rank's budget keeps room for the one activation that is whole at a time (during
// its F, or from its R, listed right before its B, through that B; a rank runs one op at a time).
// An order within this view's budget is within the problem's.
Problem recomputing_view(const Problem& problem);

// The memory-limited list scheduler's order on the view, with R(s, j) listed right before each
// backward of a stage that can recompute; nullopt where the view starves a rank (no rank can make
// progress).
std::optional<Order> recomputing_list_order(const Problem& problem, bool later_chunk_first);

}  // namespace optpipe
