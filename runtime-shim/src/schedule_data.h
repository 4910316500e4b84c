// A checked `.opsched` in memory (docs/opsched.md). Parsing never throws: a refused file gives a
// status (truncated, bad magic, wrong endian, version, checksum, corrupt) and a one-line message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "optpipe_rt.h"

namespace optpipe::rt {

struct ScheduleData {
  optpipe_rt_schedule_info info{};
  std::vector<optpipe_rt_stage_info> stages;
  std::vector<optpipe_rt_rank_info> ranks;
  std::vector<std::vector<optpipe_rt_action>> actions;  // per rank, file order
};

optpipe_rt_status parse_opsched(const uint8_t* data, size_t size, ScheduleData* out,
                                std::string* message);

// Pool high-water mark when `rank`'s actions run in the runner's issue order (issue_order.h, ties
// included): a slot of the offload's bytes is taken at OFFLOAD and freed after the B/BW of the
// same (stage, microbatch), as the runner releases it. nullopt when they need more
// than 2^62 bytes at once.
std::optional<int64_t> host_pool_bytes_for(const ScheduleData& data, int rank);

// F, B, W, BW and R run on the compute stream; OFFLOAD and RELOAD on copy channels.
inline bool is_compute_op(int op) {
  return (op >= OPTPIPE_RT_OP_F && op <= OPTPIPE_RT_OP_BW) || op == OPTPIPE_RT_OP_R;
}

// The (stage, microbatch) activations `rank`'s schedule recomputes (has an R for).
std::set<std::pair<int, int>> recomputed_activations(const ScheduleData& data, int rank);

}  // namespace optpipe::rt
