// Heads of the sequencing bound (bounds/sequencing_bound.h) paced by memory (docs/semantics.md,
// The sequencing bound): an F allocates its activation, so on a rank whose budget binds it waits
// until enough of the rank's earlier activations can have been released or offloaded.
#pragma once

#include <functional>
#include <limits>

#include "bounds/op_heads.h"
#include "model/problem.h"

namespace optpipe {

// Raises `heads`, each a lower bound in every schedule within the budget, until none rises: along
// one microbatch's dependencies (the k-th F of a stage starts after the k-th F of the stage before
// it ends, and so on for B and W), one op of a family at a time, and by memory: the k-th F of a
// rank's c-th stage (model order) comes after k + 1 Fs of each of the rank's first c stages have
// allocated their activations, so it starts no earlier than the first moment at which the Bs and Ws
// that can have ended by then, at their heads, and the offloads the rank's channel can have
// finished (one at a time, each after an F, freeing no more than its stage's offloads can have
// moved) leave room for it; where ranks share their copy channels (a link group), also no earlier
// than the group's channel can have finished the offloads that it and the group's other ranks,
// holding the activations of the microbatches that passed them first, need to fit. Where the rank
// has later stages, their Fs that must come first (the k-th F of the earlier stage would leave no
// room for them by their latest start in schedules of the makespan, or ever without a link) count
// too. In the pacing for every makespan, where the memory raises no head, also by each rank's load
// (bounds/rank_load_heads.h). On ranks with a stage that can recompute, as many of the
// activations counted as the rank's cap in `checkpoints` allows at the moment checked may be held
// as their checkpoint and count for their checkpoint bytes (R's allocation is not checked). With a
// `makespan`, the heads hold in the schedules that end by then: an activation away at a time t
// comes back by a reload after t, one at a time on the rank's channel, and its B and the backwards
// below it follow before the end, so fewer can be away late. `settled`, where given, tells whether
// the last round raised no head: on a budget that no schedule fits, heads can creep up round after
// round until the rounds run out.
// `stop` (the time limit, an interrupt), asked before each rank's pacing in each round, ends the
// pacing early: every head raised so far holds, so the heads stay valid, only lower.
OpHeads paced_heads(const Problem& problem, OpHeads heads,
                    double makespan = std::numeric_limits<double>::infinity(),
                    bool* settled = nullptr, const CheckpointCaps& checkpoints = {},
                    const std::function<bool()>& stop = nullptr);

}  // namespace optpipe
