// The binary schedule `.opsched` (docs/opsched.md, layout in runtime-shim/include/
// optpipe_opsched_format.h): what the runtime shim loads on every rank without a JSON parser.
#pragma once

#include <string>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

// The file's bytes: header (R, S, m, v, placement, channel mode, profile SHA-256, method), one
// record per stage (rank, T_F/T_B/T_W/T_R, A/G/O/C), one per rank (budget, static bytes, link
// group, action count and offset), every rank's actions in the schedule's order, and a CRC32
// trailer. Throws Error when the schedule does not fit the problem's shape (rank count, stage ids).
std::string encode_opsched(const Problem& problem, const Schedule& schedule);

// encode_opsched() written atomically to `path`. Used by `optpipe-compile --format bin`.
void write_opsched(const std::string& path, const Problem& problem, const Schedule& schedule);

// `optpipe convert IN OUT`: reads the optpipe.schedule/v1 JSON at `schedule_json_path`, checks
// that it was compiled for `problem` (same profile SHA-256, validates against it) and writes the
// `.opsched` at `opsched_path`. The profile is needed because the binary carries the stage costs
// and memory that the shim sizes its host pool and measured profile from. Throws
// Error(ErrorKind::kInvalidSchedule) for a schedule of another profile or an invalid one.
void convert_schedule_json_to_opsched(const std::string& schedule_json_path, const Problem& problem,
                                      const std::string& opsched_path);

}  // namespace optpipe
