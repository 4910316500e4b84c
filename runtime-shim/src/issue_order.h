// The order a rank's actions are issued in at run time (docs/runtime-shim.md, "Runner"): the one
// order the runner walks, the host pool is sized in, and the Python binding issues transfers in.
#pragma once

#include <cstddef>
#include <vector>

#include "optpipe_rt.h"

namespace optpipe::rt {

// Indices into `actions` (one rank's, in file order: predicted start) in issue order.
std::vector<size_t> issue_order(const std::vector<optpipe_rt_action>& actions);

}  // namespace optpipe::rt
