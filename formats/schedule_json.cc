#include "formats/schedule_json.h"

#include <fmt/format.h>

#include "formats/file_io.h"
#include "formats/json_fields.h"
#include "model/errors.h"
#include "timing/validator.h"

namespace optpipe {

using nlohmann::json;

nlohmann::json schedule_to_json(const Problem& problem, const Schedule& schedule,
                                const Metrics& metrics, const SolverStats* solver) {
  json ranks = json::array();
  for (int r = 0; r < problem.ranks; ++r) {
    json actions = json::array();
    for (const Action& a : schedule.ranks[r]) {
      json action = {{"op", to_string(a.ref.op)},
                     {"stage", a.ref.stage},
                     {"microbatch", a.ref.microbatch},
                     {"start", a.start},
                     {"end", a.end}};
      if (is_transfer(a.ref.op)) action["bytes"] = a.bytes;
      actions.push_back(std::move(action));
    }
    const RankMetrics& rm = metrics.ranks[r];
    ranks.push_back({{"rank", r},
                     {"busy", rm.busy},
                     {"peak_bytes", rm.peak_bytes},
                     {"budget_bytes", rm.budget_bytes},
                     {"actions", std::move(actions)}});
  }
  return {{"format", kScheduleFormat},
          {"profile", {{"name", problem.name}, {"sha256", problem.profile_sha256}}},
          {"time_unit", to_string(problem.time_unit)},
          {"pipeline",
           {{"ranks", problem.ranks},
            {"chunks_per_rank", problem.chunks_per_rank},
            {"microbatches", problem.microbatches},
            {"rank_of_stage", problem.rank_of_stage}}},
          {"method", schedule.method},
          {"metrics",
           {{"makespan", metrics.makespan},
            {"span", metrics.span},
            {"idle_fraction", metrics.idle_fraction},
            {"bubble_rate", metrics.bubble_rate},
            {"lower_bound", metrics.lower_bound},
            {"lower_bound_source", to_string(metrics.lower_bound_source)},
            {"gap", metrics.gap},
            {"feasible", metrics.within_budget}}},
          {"solver", solver ? to_json(*solver) : json()},
          {"ranks", std::move(ranks)}};
}

namespace {

Action read_action(const JsonField& field) {
  field.expect_object({"op", "stage", "microbatch", "start", "end", "bytes"});
  const JsonField op_field = field.get("op");
  const auto op = parse_op(op_field.string());
  if (!op) op_field.fail("must be one of F, B, W, BW, R, OFFLOAD, RELOAD");
  Action action;
  action.ref = {*op, static_cast<int>(field.get("stage").integer(0, 1 << 20)),
                static_cast<int>(field.get("microbatch").integer(0, 1 << 24))};
  action.start = field.get("start").non_negative_number();
  action.end = field.get("end").non_negative_number();
  if (const auto bytes = field.find("bytes")) action.bytes = bytes->integer(0);
  return action;
}

}  // namespace

ScheduleFile parse_schedule_json(std::string_view json_text, const std::string& source) {
  const json document = parse_json_document(json_text, source);
  const JsonField root(document, source);
  root.expect_object(
      {"format", "profile", "time_unit", "pipeline", "method", "metrics", "solver", "ranks"});
  const JsonField format = root.get("format");
  if (format.string() != kScheduleFormat) {
    format.fail(fmt::format("must be \"{}\"", kScheduleFormat));
  }
  ScheduleFile file;
  const JsonField profile = root.get("profile");
  profile.expect_object({"name", "sha256"});
  file.profile_sha256 = profile.get("sha256").string();
  file.schedule.method = root.get("method").string();
  if (const auto solver = root.find("solver"); solver && solver->value().is_object()) {
    if (const auto status = solver->find("status")) file.solver_status = status->string();
  }
  for (const JsonField& rank_field : root.get("ranks").items()) {
    rank_field.expect_object({"rank", "busy", "peak_bytes", "budget_bytes", "actions"});
    const int64_t rank = rank_field.get("rank").integer(0, 1 << 20);
    if (rank != static_cast<int64_t>(file.schedule.ranks.size())) {
      rank_field.get("rank").fail(
          fmt::format("must be {} (ranks are listed in order)", file.schedule.ranks.size()));
    }
    file.budget_bytes.push_back(rank_field.get("budget_bytes").integer(0));
    auto& actions = file.schedule.ranks.emplace_back();
    for (const JsonField& action : rank_field.get("actions").items()) {
      actions.push_back(read_action(action));
    }
  }
  return file;
}

ScheduleFile load_schedule_json(const std::string& path) {
  return parse_schedule_json(read_text_file(path), path);
}

ScheduleFile load_valid_schedule(const Problem& problem, const std::string& profile_path,
                                 const std::string& path) {
  ScheduleFile file = load_schedule_json(path);
  if (file.profile_sha256 != problem.profile_sha256) {
    throw Error(ErrorKind::kInvalidSchedule,
                fmt::format("{}: was compiled for another profile (sha256 {}), {} has {}; "
                            "recompile it with optpipe-compile",
                            path, file.profile_sha256.substr(0, 12), profile_path,
                            problem.profile_sha256.substr(0, 12)));
  }
  if (const auto violation = validate(problem, file.schedule)) {
    throw Error(ErrorKind::kInvalidSchedule,
                fmt::format("{}: invalid: {}", path, violation->message));
  }
  return file;
}

}  // namespace optpipe
