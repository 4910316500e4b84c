// The Problem: everything a generator, the simulator, the validator and the solver need to know
// about one pipeline (docs/design.md §3). Built from a profile by parse_profile(); plain data
// otherwise.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace optpipe {

enum class TimeUnit { kMilliseconds, kMicroseconds };

enum class PlacementKind { kLoop, kVShape, kExplicit };

// Costs of one stage. Times are in the problem's time unit, sizes in bytes.
struct StageCosts {
  double forward = 0;
  double backward_input = 0;
  double backward_weight = 0;
  int64_t activation_bytes =
      0;  // A: allocated by F, held until B (A - G released) and W (G released)
  int64_t weight_grad_bytes = 0;  // G: the part of A that W still needs after B
  int64_t offloadable_bytes = 0;  // O <= A: what an offload moves to host and a reload brings back
  double recompute_forward = 0;   // T_R: duration of R, the forward run again before B
  // C <= A: what F keeps (the stage input) when the activation is recomputed. Unset: the stage
  // cannot recompute.
  std::optional<int64_t> checkpoint_bytes = std::nullopt;

  bool can_recompute() const { return checkpoint_bytes.has_value(); }
  // A - C: what F of a recomputed activation frees at its end and R allocates again.
  int64_t recomputed_bytes() const {
    return activation_bytes - checkpoint_bytes.value_or(activation_bytes);
  }
};

enum class ChannelMode { kShared, kDuplex };

// Host link used by offload (D2H) and reload (H2D). Bandwidths in bytes per time unit.
struct OffloadLink {
  double d2h_bytes_per_time = 0;
  double h2d_bytes_per_time = 0;
  ChannelMode channels = ChannelMode::kDuplex;
  std::vector<int> link_group_of_rank;  // ranks in one group share their copy channels
};

struct Problem {
  std::string name;
  TimeUnit time_unit = TimeUnit::kMilliseconds;
  int ranks = 1;
  int chunks_per_rank = 1;
  int microbatches = 1;
  PlacementKind placement = PlacementKind::kLoop;
  std::vector<int> rank_of_stage;  // size S = ranks * chunks_per_rank
  std::vector<StageCosts> stages;  // size S
  double p2p_latency = 0;
  std::vector<int64_t> budget_bytes;  // per rank
  std::vector<int64_t> static_bytes;  // per rank
  std::optional<OffloadLink> offload;
  std::string profile_sha256;  // of the canonical profile JSON, names the problem in schedule files

  int num_stages() const { return static_cast<int>(stages.size()); }
  // Latency of the activation/gradient hand-off between two stages: 0 on the same rank.
  double p2p(int from_stage, int to_stage) const {
    return rank_of_stage[from_stage] == rank_of_stage[to_stage] ? 0.0 : p2p_latency;
  }
  // Stages hosted by a rank, in model order.
  std::vector<int> stages_of_rank(int rank) const;
  double offload_time(int stage) const;
  double reload_time(int stage) const;
  // Least time from an offloaded activation's F start to its B's end: F, its offload, its reload
  // and B, one after the other.
  double offloaded_lifespan(int stage) const;
  // Activation budget: what the rank may hold beyond its static bytes.
  int64_t activation_budget(int rank) const { return budget_bytes[rank] - static_bytes[rank]; }
  // Whether offloading an activation of `stage` frees memory: a host link and bytes to move.
  bool offload_frees_memory(int stage) const {
    return offload && stages[stage].offloadable_bytes > 0;
  }
  // Whether recomputing an activation of `stage` frees memory: it keeps less than A.
  bool recompute_frees_memory(int stage) const {
    return stages[stage].can_recompute() && stages[stage].recomputed_bytes() > 0;
  }
  // Whether some stage may recompute (declares its checkpoint bytes).
  bool any_stage_can_recompute() const;
};

std::vector<int> place_stages(PlacementKind kind, int ranks, int chunks_per_rank);
const char* to_string(TimeUnit unit);
const char* to_string(PlacementKind kind);
const char* to_string(ChannelMode mode);

}  // namespace optpipe
