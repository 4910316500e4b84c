// Memory-paced offload (docs/methods.md): a base order with every activation of the ranks that
// cannot hold their in-flight set offloaded right after its F and reloaded a few compute ops
// before its B, each F, R and RELOAD held by the memory fence (simulate_within_budget) until the
// offloads before it have made room. Where stages are coarse and only a few activations fit, the
// link paces the pipeline, and this simple policy keeps it as busy as the link allows.
#pragma once

#include <string>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

// Why it does not apply: it needs a host link (the profile's `offload`).
std::string paced_offload_unsupported(const Problem& problem);

// The fastest fitting order over the family: base orders (1F1B with W right after B, ZB-H1 and
// ZB-H2 on one chunk; interleaved 1F1B on loop chunks; ZB-V, V-Half and V-Min on the V-shape),
// offload scope (the ranks over budget, or every rank) and reload lead (1 to 4 compute ops).
// Where none fits, the one closest to the budget.
Order paced_offload_order(const Problem& problem);

}  // namespace optpipe
