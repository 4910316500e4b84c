#include "driver/schedule_cache.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "formats/file_io.h"
#include "formats/schedule_json.h"
#include "formats/sha256.h"
#include "model/errors.h"
#include "model/version.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {

namespace {

double three_digits(double value) {
  if (value == 0 || !std::isfinite(value)) return value;
  const double scale = std::pow(10.0, 2 - std::floor(std::log10(std::abs(value))));
  return std::round(value * scale) / scale;
}

int64_t mebibytes(int64_t bytes) {
  return (bytes + (int64_t{1} << 19)) >> 20;
}

}  // namespace

std::string cache_key(const Problem& problem, const std::string& method, double effort) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StageCosts& c : problem.stages) {
    nlohmann::json& stage = stages.emplace_back(
        nlohmann::json::array({three_digits(c.forward), three_digits(c.backward_input),
                               three_digits(c.backward_weight), mebibytes(c.activation_bytes),
                               mebibytes(c.weight_grad_bytes), mebibytes(c.offloadable_bytes)}));
    // Only stages that can recompute add to the key: keys of other problems stay as they were.
    if (c.can_recompute()) {
      stage.push_back(three_digits(c.recompute_forward));
      stage.push_back(mebibytes(*c.checkpoint_bytes));
    }
  }
  nlohmann::json budgets = nlohmann::json::array();
  for (int r = 0; r < problem.ranks; ++r) {
    // Budgets exactly: a schedule must never be reused for a smaller one it might not fit.
    budgets.push_back({problem.budget_bytes[r], problem.static_bytes[r]});
  }
  nlohmann::json key = {{"version", optpipe_version()},
                        {"effort", effort},
                        {"method", method},
                        {"time_unit", to_string(problem.time_unit)},
                        {"shape", {problem.ranks, problem.chunks_per_rank, problem.microbatches}},
                        {"placement", problem.rank_of_stage},
                        {"stages", stages},
                        {"p2p", three_digits(problem.p2p_latency)},
                        {"memory", budgets}};
  if (problem.offload) {
    key["offload"] = {three_digits(problem.offload->d2h_bytes_per_time),
                      three_digits(problem.offload->h2d_bytes_per_time),
                      to_string(problem.offload->channels), problem.offload->link_group_of_rank};
  }
  return sha256_hex(key.dump());
}

ScheduleCache::ScheduleCache(std::string dir, double effort) : dir_(std::move(dir)), effort_(effort) {
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  if (error || !std::filesystem::is_directory(dir_)) {
    throw InputError(fmt::format("--cache {}: cannot use it as a directory: {}", dir_,
                                 error ? error.message() : "not a directory"));
  }
}

std::string ScheduleCache::path_for(const Problem& problem, const std::string& method) const {
  return (std::filesystem::path(dir_) / (cache_key(problem, method, effort_) + ".schedule.json")).string();
}

std::optional<CachedSchedule> ScheduleCache::find(const Problem& problem,
                                                  const std::string& method) const {
  const std::string path = path_for(problem, method);
  // The cache's own entry: a symlink, FIFO or device in its place is a miss, never followed.
  const std::optional<std::string> text = read_own_file(path);
  if (!text) return std::nullopt;
  try {
    const ScheduleFile file = parse_schedule_json(*text, path);
    // Re-time the stored order for this problem: its costs may differ below the key's precision.
    Schedule schedule =
        simulate_within_budget(problem, order_of(file.schedule), file.schedule.method);
    if (validate(problem, schedule)) return std::nullopt;
    const bool final =
        file.profile_sha256 == problem.profile_sha256 && file.solver_status == "optimal";
    return CachedSchedule{std::move(schedule), final};
  } catch (const std::exception&) {
    return std::nullopt;  // a damaged or foreign entry is a miss, and is overwritten later
  }
}

void ScheduleCache::store(const Problem& problem, const std::string& method,
                          const Schedule& schedule, const Metrics& metrics,
                          const SolverStats* solver) const {
  replace_own_file(path_for(problem, method),
                   schedule_to_json(problem, schedule, metrics, solver).dump() + "\n");
}

}  // namespace optpipe
