// Problems built in code for tests: uniform ones for closed forms, random ones for properties.
#pragma once

#include <random>

#include "compiler/problem.h"

namespace optpipe::testing {

struct UniformCosts {
  double forward = 1;
  double backward_input = 1;
  double backward_weight = 1;
  int64_t activation_bytes = 1000;
  int64_t weight_grad_bytes = 0;  // peak bytes / A then counts activations awaiting their B
};

// R ranks, v chunks, m microbatches, every stage alike, ample memory, no offload link.
Problem uniform_problem(int ranks, int chunks, int microbatches, UniformCosts costs = {},
                        PlacementKind placement = PlacementKind::kLoop, double p2p_latency = 0);

// Varied R, v, m, per-stage costs, latency, placement, offload link, channel mode, link groups.
// Memory budget ample (every schedule fits).
Problem random_problem(std::mt19937& rng);

}  // namespace optpipe::testing
