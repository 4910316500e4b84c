#include "bounds/microbatch_paths.h"

namespace optpipe {

MicrobatchPaths microbatch_paths(const Problem& problem) {
  const int num_stages = problem.num_stages();
  const int last = num_stages - 1;
  MicrobatchPaths paths;
  paths.forward_offset.assign(num_stages, 0.0);
  for (int s = 1; s < num_stages; ++s) {
    paths.forward_offset[s] =
        paths.forward_offset[s - 1] + problem.stages[s - 1].forward + problem.p2p(s - 1, s);
  }
  const double forwards_end = paths.forward_offset[last] + problem.stages[last].forward;

  // Least time from B(S-1, j) start to B(s, j) end.
  std::vector<double> backwards_to(num_stages);
  backwards_to[last] = problem.stages[last].backward_input;
  for (int s = last - 1; s >= 0; --s) {
    backwards_to[s] =
        backwards_to[s + 1] + problem.p2p(s + 1, s) + problem.stages[s].backward_input;
  }
  paths.round_trip.resize(num_stages);
  for (int s = 0; s < num_stages; ++s) {
    paths.round_trip[s] = forwards_end - paths.forward_offset[s] + backwards_to[s];
  }

  paths.backward_tail.resize(num_stages);
  paths.backward_tail[0] = problem.stages[0].backward_input + problem.stages[0].backward_weight;
  for (int s = 1; s < num_stages; ++s) {
    paths.backward_tail[s] =
        problem.stages[s].backward_input + problem.p2p(s, s - 1) + paths.backward_tail[s - 1];
  }
  paths.forward_tail.resize(num_stages);
  for (int s = 0; s < num_stages; ++s) {
    paths.forward_tail[s] =
        paths.round_trip[s] - problem.stages[s].backward_input + paths.backward_tail[s];
  }
  return paths;
}

}  // namespace optpipe
