// The pinned host pool each rank needs at run time, as the runtime shim sizes it: its own replay
// of the rank's actions in the runner's issue order (runtime-shim/src/issue_order.h), on the
// `.opsched` this schedule encodes to. `optpipe validate` reports it and refuses a schedule the
// shim cannot size a pool for.
#pragma once

#include <cstdint>
#include <vector>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

// Per rank, the host pool bytes; throws Error(ErrorKind::kInvalidSchedule) with the shim's
// message when the shim refuses the schedule.
std::vector<int64_t> runtime_host_pool_bytes(const Problem& problem, const Schedule& schedule);

}  // namespace optpipe
