// A makespan lower bound from the activation budget (docs/semantics.md, Metrics: lower_bound).
// Every activation occupies its rank's memory for a least area of bytes x time, and holds all of
// its bytes for a least time; offload and recompute shrink both, offload at the price of
// copy-channel time. A rank never holds more than its activation budget, so its activations'
// area fits under budget x makespan, and at most floor(budget / least activation) of them are
// whole at once, so their whole time fits under that many times the makespan.
#pragma once

#include "model/problem.h"

namespace optpipe {

// The least makespan C at which the relaxation has a fractional solution: per rank, its least
// activation area and whole time minus what offload and recompute save fit under its activation
// budget and its whole activations from its first F's earliest start to C; per link group, its copy
// channels can move the offloaded bytes within C. Every schedule within the budget has a makespan
// of at least this; 0 when memory does not bind.
double memory_bound(const Problem& problem);

}  // namespace optpipe
