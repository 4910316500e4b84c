// `optpipe.schedule/v1` (schemas/schedule.schema.json, docs/schedule.md): a timed schedule with
// the identity of the profile it was compiled for and its predicted metrics.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
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
  nlohmann::json header;              // the document without the actions: what it claims
};

// Throws InputError naming the field on anything malformed. Actions are checked for shape only
// (op names, integer ids, finite times); validate() judges them against a profile.
ScheduleFile parse_schedule_json(std::string_view json_text, const std::string& source);
ScheduleFile load_schedule_json(const std::string& path);

// What the file's header claims and the schedule and profile do not bear out, in one line:
// time_unit, pipeline (ranks, chunks_per_rank, microbatches, rank_of_stage), each rank's busy,
// peak_bytes and budget_bytes, and the metrics. The lower bound is recomputed; a higher one is
// accepted only as the solver's. With `check_budget` false (a problem whose budget is not the
// schedule's), budgets, feasibility and the bound, which depend on it, are not compared.
std::optional<std::string> header_mismatch(const Problem& problem, const ScheduleFile& file,
                                           bool check_budget = true);

// The schedule file at `path`, once it is known to be compiled for `problem` (same profile
// SHA-256), to pass the validator against it and to claim nothing in its header that it is not
// (header_mismatch); Error(ErrorKind::kInvalidSchedule) naming the first problem otherwise.
// `profile_path` names the profile in messages.
ScheduleFile load_valid_schedule(const Problem& problem, const std::string& profile_path,
                                 const std::string& path, bool check_budget = true);

}  // namespace optpipe
