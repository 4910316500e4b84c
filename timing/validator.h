// The independent validator (docs/design.md §3): every schedule that leaves the compiler passes it.
#pragma once

#include <optional>
#include <string>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

struct Violation {
  std::string message;  // one line: what is wrong, where and when
};

// Checks, in this order: every action is well formed (stage on its rank, duration and bytes as the
// profile says, R only where the stage has checkpoint bytes); completeness (F once; B and W, or BW,
// once; a reload exactly for each offload; R at most once, never for an offloaded activation);
// dependencies with p2p latency; one compute op (R included) at a time per rank; one transfer at a
// time per copy channel; live memory within budget on every rank. Returns the first violation.
std::optional<Violation> validate(const Problem& problem, const Schedule& schedule);

// The last check alone: live memory within budget on every rank. For a schedule the simulator has
// just timed from an order, which meets the others by construction (the local search's states);
// what leaves the compiler passes validate().
std::optional<Violation> validate_memory(const Problem& problem, const Schedule& schedule);

// Tolerance for comparing times: schedules read from files carry rounded decimals.
bool at_or_before(double a, double b);

}  // namespace optpipe
