#include "model/problem.h"

#include <algorithm>
#include <limits>

namespace optpipe {

std::vector<int> Problem::stages_of_rank(int rank) const {
  std::vector<int> stages_here;
  for (int s = 0; s < num_stages(); ++s) {
    if (rank_of_stage[s] == rank) stages_here.push_back(s);
  }
  return stages_here;
}

double Problem::offload_time(int stage) const {
  if (!offload) return std::numeric_limits<double>::infinity();
  return static_cast<double>(stages[stage].offloadable_bytes) / offload->d2h_bytes_per_time;
}

double Problem::reload_time(int stage) const {
  if (!offload) return std::numeric_limits<double>::infinity();
  return static_cast<double>(stages[stage].offloadable_bytes) / offload->h2d_bytes_per_time;
}

double Problem::offloaded_lifespan(int stage) const {
  const StageCosts& c = stages[stage];
  return c.forward + offload_time(stage) + reload_time(stage) + c.backward_input;
}

bool Problem::any_stage_can_recompute() const {
  return std::any_of(stages.begin(), stages.end(),
                     [](const StageCosts& s) { return s.can_recompute(); });
}

std::vector<int> place_stages(PlacementKind kind, int ranks, int chunks_per_rank) {
  const int num_stages = ranks * chunks_per_rank;
  std::vector<int> rank_of_stage(num_stages);
  for (int s = 0; s < num_stages; ++s) {
    if (kind == PlacementKind::kVShape) {
      // Chunk c runs down the ranks when c is even and back up when c is odd.
      const int chunk = s / ranks;
      const int offset = s % ranks;
      rank_of_stage[s] = chunk % 2 == 0 ? offset : ranks - 1 - offset;
    } else {
      rank_of_stage[s] = s % ranks;
    }
  }
  return rank_of_stage;
}

const char* to_string(TimeUnit unit) {
  return unit == TimeUnit::kMilliseconds ? "ms" : "us";
}

const char* to_string(PlacementKind kind) {
  switch (kind) {
    case PlacementKind::kLoop:
      return "loop";
    case PlacementKind::kVShape:
      return "vshape";
    case PlacementKind::kExplicit:
      return "explicit";
  }
  return "?";
}

const char* to_string(ChannelMode mode) {
  return mode == ChannelMode::kShared ? "shared" : "duplex";
}

}  // namespace optpipe
