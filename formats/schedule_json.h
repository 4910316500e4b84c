// `optpipe.schedule/v1` (schemas/schedule.schema.json, docs/schedule.md): a timed schedule with
// the identity of the profile it was compiled for and its predicted metrics.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "model/problem.h"
#include "model/schedule.h"
#include "model/solver_stats.h"
#include "timing/metrics.h"

namespace optpipe {

inline constexpr std::string_view kScheduleFormat = "optpipe.schedule/v1";

nlohmann::json schedule_to_json(const Problem& problem, const Schedule& schedule,
                                const Metrics& metrics, const SolverStats* solver = nullptr);

// What a schedule file says besides its actions.
struct ScheduleFile {
  Schedule schedule;
  std::string profile_sha256;
  std::vector<int64_t> budget_bytes;  // per rank, what the schedule was compiled for
  std::string solver_status;          // `solver.status`, empty when the optimiser did not run
};

// Throws InputError naming the field on anything malformed. Actions are checked for shape only
// (op names, integer ids, finite times); validate() judges them against a profile.
ScheduleFile parse_schedule_json(std::string_view json_text, const std::string& source);
ScheduleFile load_schedule_json(const std::string& path);

// The schedule file at `path`, once it is known to be compiled for `problem` (same profile
// SHA-256) and to pass the validator against it; Error(ErrorKind::kInvalidSchedule) naming the
// first problem otherwise. `profile_path` names the profile in messages.
ScheduleFile load_valid_schedule(const Problem& problem, const std::string& profile_path,
                                 const std::string& path);

}  // namespace optpipe
