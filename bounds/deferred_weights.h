// How far a rank's memory lets it put its Ws off (docs/semantics.md, The sequencing bound): when
// a B starts, its rank holds that B's whole activation and the G of every B before it whose W
// has not ended, so only a few Ws can wait behind later Bs. The sequencing bound (bounds/
// sequencing_bound.h) takes from it a tail for each W and a head for each B, which Jackson's
// schedule alone would let it defer to the end (ZB-H2's cool-down) or run back to back.
#pragma once

#include <vector>

#include "model/problem.h"

namespace optpipe {

// The most of the rank's Bs that can have ended with their W still to run when another of its
// Bs starts, in any schedule within the budget: (activation budget − least A) / least G of its
// stages, rounded down; `unlimited` where a stage's G is 0.
int most_deferred_weights(const Problem& problem, int rank, int unlimited);

// Given a tail of each of the rank's Bs (their least time from end to the schedule's end, in any
// order), the least tail of its k-th W from the last (k from 0, over all its stages): it ends
// before the (k − d − 1)-th B from the last starts, d = `most_deferred`, so at least that B's
// tail plus `least_backward` (its shortest T_B) before the end; 0 for k ≤ d. Non-decreasing in k.
std::vector<double> deferred_weight_tails(std::vector<double> backward_tails, int most_deferred,
                                          double least_backward);

// Given a head of each of the rank's Ws (in any order), the least head of its k-th B (k from 0,
// over all its stages): the (k − d − 1)-th W has ended by then, so at least that W's head plus
// `least_weight` (its shortest T_W); 0 for k ≤ d. Non-decreasing in k.
std::vector<double> deferred_backward_heads(std::vector<double> weight_heads, int most_deferred,
                                            double least_weight);

}  // namespace optpipe
