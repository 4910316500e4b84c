#include "formats/schedule_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "formats/file_io.h"
#include "formats/json_fields.h"
#include "model/errors.h"
#include "timing/validator.h"

namespace optpipe {

using nlohmann::json;

namespace {

// The pipeline a schedule file names: written by schedule_to_json, checked by header_mismatch.
json pipeline_json(const Problem& problem) {
  return {{"ranks", problem.ranks},
          {"chunks_per_rank", problem.chunks_per_rank},
          {"microbatches", problem.microbatches},
          {"rank_of_stage", problem.rank_of_stage}};
}

}  // namespace

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
          {"pipeline", pipeline_json(problem)},
          {"method", schedule.method},
          {"metrics", to_json(metrics)},
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
  if (json_text.substr(0, 7) == "OPSCHED") {
    throw InputError(
        fmt::format("{}: is a binary .opsched; this reads the JSON schedule "
                    "(optpipe-compile's default --format json)",
                    source));
  }
  const json document = parse_json_document(json_text, source);
  const JsonField root(document, source);
  root.expect_object(
      {"format", "profile", "time_unit", "pipeline", "method", "metrics", "solver", "ranks"});
  const JsonField format = root.get("format");
  if (format.string() != kScheduleFormat) {
    format.fail(fmt::format("must be \"{}\"", kScheduleFormat));
  }
  ScheduleFile file;
  file.header = document;
  if (file.header["ranks"].is_array()) {
    for (auto& rank : file.header["ranks"]) {
      if (rank.is_object()) rank.erase("actions");
    }
  }
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

namespace {

bool close(double a, double b) {
  return std::abs(a - b) <= 1e-9 * std::max({1.0, std::abs(a), std::abs(b)});
}

// `object`'s field `key`, or null where `object` is no object or lacks it: the header's fields
// are not type-checked by the reader, so none of them may be assumed an object or a string.
json field_at(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? json(nullptr) : *it;
}

// The same as a number; nullopt when missing or not a number.
std::optional<double> number_at(const json& object, const char* key) {
  const json value = field_at(object, key);
  if (!value.is_number()) return std::nullopt;
  return value.get<double>();
}

}  // namespace

std::optional<std::string> header_mismatch(const Problem& problem, const ScheduleFile& file,
                                           bool check_budget) {
  const json& h = file.header;
  auto says = [](const std::string& field, const json& claim, const std::string& truth) {
    return fmt::format("{} says {}, but {}", field,
                       claim.is_string() ? claim.get<std::string>() : claim.dump(), truth);
  };
  if (field_at(h, "time_unit") != to_string(problem.time_unit)) {
    return says("time_unit", field_at(h, "time_unit"),
                fmt::format("the profile's times are in {}", to_string(problem.time_unit)));
  }
  const json pipeline = field_at(h, "pipeline");
  const json expected_pipeline = pipeline_json(problem);
  for (const auto& [key, value] : expected_pipeline.items()) {
    if (field_at(pipeline, key.c_str()) != value) {
      return says("pipeline." + key, field_at(pipeline, key.c_str()),
                  fmt::format("the profile has {}", value.dump()));
    }
  }
  const Metrics m = compute_metrics(problem, file.schedule);
  const json& ranks = h.at("ranks");  // an array of objects: the reader checked it
  for (int r = 0; r < problem.ranks && r < static_cast<int>(ranks.size()); ++r) {
    const json& rank = ranks[r];
    const RankMetrics& truth = m.ranks[r];
    const auto busy = number_at(rank, "busy");
    if (!busy || !close(*busy, truth.busy)) {
      return says(fmt::format("ranks[{}].busy", r), field_at(rank, "busy"),
                  fmt::format("its compute ops take {}", truth.busy));
    }
    if (field_at(rank, "peak_bytes") != truth.peak_bytes) {
      return says(fmt::format("ranks[{}].peak_bytes", r), field_at(rank, "peak_bytes"),
                  fmt::format("its actions peak at {}", truth.peak_bytes));
    }
    if (check_budget && field_at(rank, "budget_bytes") != problem.budget_bytes[r]) {
      return says(fmt::format("ranks[{}].budget_bytes", r), field_at(rank, "budget_bytes"),
                  fmt::format("the budget is {}; pass --memory-budget with the budget it was "
                              "compiled for",
                              problem.budget_bytes[r]));
    }
  }
  const json metrics = field_at(h, "metrics");
  const std::pair<const char*, double> exact[] = {{"makespan", m.makespan},
                                                  {"span", m.span},
                                                  {"idle_fraction", m.idle_fraction},
                                                  {"bubble_rate", m.bubble_rate}};
  for (const auto& [key, value] : exact) {
    const auto claim = number_at(metrics, key);
    if (!claim || !close(*claim, value)) {
      return says(fmt::format("metrics.{}", key), field_at(metrics, key),
                  fmt::format("the schedule's is {}", value));
    }
  }
  if (!check_budget) return std::nullopt;  // feasibility and the bound depend on the budget
  if (field_at(metrics, "feasible") != m.within_budget) {
    return says("metrics.feasible", field_at(metrics, "feasible"),
                m.within_budget ? "it fits the budget" : "it does not fit the budget");
  }
  // The bound: the profile's own, or a higher one only CBC can prove, never above the makespan.
  const auto bound = number_at(metrics, "lower_bound");
  const json source = field_at(metrics, "lower_bound_source");
  const bool own =
      bound && close(*bound, m.lower_bound) && source == to_string(m.lower_bound_source);
  const bool solver = bound && *bound > m.lower_bound &&
                      source == to_string(BoundSource::kSolver) &&
                      (*bound <= m.makespan || close(*bound, m.makespan));
  if (!own && !solver) {
    return says(
        "metrics.lower_bound",
        fmt::format("{} ({})", field_at(metrics, "lower_bound").dump(), source.dump()),
        fmt::format("the profile's bound is {} ({}), and only the solver proves a higher one, "
                    "never above the makespan {}",
                    m.lower_bound, to_string(m.lower_bound_source), m.makespan));
  }
  const double gap = *bound > 0 ? m.makespan / *bound - 1 : 0;
  const auto claimed_gap = number_at(metrics, "gap");
  if (!claimed_gap || !close(*claimed_gap, gap)) {
    return says("metrics.gap", field_at(metrics, "gap"),
                fmt::format("makespan and lower_bound make it {}", gap));
  }
  return std::nullopt;
}

ScheduleFile load_valid_schedule(const Problem& problem, const std::string& profile_path,
                                 const std::string& path, bool check_budget) {
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
  if (const auto mismatch = header_mismatch(problem, file, check_budget)) {
    throw Error(ErrorKind::kInvalidSchedule, fmt::format("{}: invalid: {}", path, *mismatch));
  }
  return file;
}

}  // namespace optpipe
