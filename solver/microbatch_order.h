// The order model breaks the symmetry between same-stage ops of one type by microbatch order
// (docs/solver.md, Reductions); the local search does not keep that order. Some of those ops are
// interchangeable, so a schedule that breaks the order can be relabelled into one that keeps it and
// runs the same work at the same times: the form the model admits as its MIP start.
#pragma once

#include "model/schedule.h"

namespace optpipe {

// `order` with each rank's W ops of a stage, and its offloads and reloads of a stage, given their
// microbatches in increasing order along the rank's list. They are interchangeable when the rank
// runs the stage's F and B ops in microbatch order: a W needs only its own B, and a transfer of a
// stage moves as many bytes as another, so any of them can take the place of another that comes
// later in microbatch order (an exchange argument; check the result with the validator).
Order in_microbatch_order(Order order);
// The same for a timed schedule, each action keeping its times.
Schedule in_microbatch_order(Schedule schedule);

}  // namespace optpipe
