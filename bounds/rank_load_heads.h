// Heads of the sequencing bound raised by their rank's load (docs/semantics.md, The sequencing
// bound: the rank's load). Before the k-th op of a family (the ops of one type on one stage, in
// start order) starts, its rank has run, one at a time, the k ops of the family before it and,
// for each of k + 1 microbatches, that microbatch's ops on the rank that come before its op of the
// family: its Fs of the rank's earlier stages (for an F), or its Fs of all the rank's stages and
// its Bs of the rank's later stages (for a B), and its own B too (for a W). Of these, the i-th of
// a family to start starts no earlier than that family's i-th head, so the least time by which
// one machine can have run them all, taking them in head order, is a head of the k-th op.
#pragma once

#include "bounds/op_heads.h"
#include "model/problem.h"

namespace optpipe {

// Raises `heads` to their ranks' load; true when one rose.
bool raise_by_rank_load(const Problem& problem, OpHeads& heads);

}  // namespace optpipe
