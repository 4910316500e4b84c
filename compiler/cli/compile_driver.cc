#include "compiler/cli/compile_driver.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/errors.h"
#include "compiler/profile.h"
#include "compiler/simulator.h"
#include "compiler/units.h"
#include "compiler/validator.h"
#include "heuristics/registry.h"

namespace optpipe {

namespace {

bool uses_optimizer(const std::string& method) {
  return method == "auto" || method == "milp";
}

std::vector<const Generator*> chosen_generators(const Problem& problem, const std::string& method) {
  std::vector<const Generator*> chosen;
  if (method == "auto" || method == "milp") {
    for (const Generator& g : generators()) {
      if (g.unsupported_reason(problem).empty()) chosen.push_back(&g);
    }
    return chosen;
  }
  const Generator* generator = find_generator(method);
  if (!generator) {
    std::vector<std::string_view> names;
    for (const Generator& g : generators()) names.push_back(g.name);
    throw InputError(
        fmt::format("--method: unknown method \"{}\"; choose auto, milp or one of: {} "
                    "(`optpipe methods` describes them)",
                    method, fmt::join(names, ", ")));
  }
  if (const std::string reason = generator->unsupported_reason(problem); !reason.empty()) {
    throw InputError(
        fmt::format("--method {}: {}; use another method or --method auto", method, reason));
  }
  chosen.push_back(generator);
  return chosen;
}

Candidate run_generator(const Problem& problem, const Generator& generator) {
  Candidate candidate;
  candidate.method = generator.name;
  candidate.schedule = simulate(problem, generator.build(problem), candidate.method);
  candidate.metrics = compute_metrics(problem, candidate.schedule);
  if (const auto violation = validate(problem, candidate.schedule)) {
    if (candidate.metrics.within_budget) {
      // Only the budget may reject a generator's schedule; anything else is a bug in it.
      throw Error(kExitInternal, fmt::format("{} produced an invalid schedule: {}", generator.name,
                                             violation->message));
    }
    candidate.rejection = violation->message;
  }
  return candidate;
}

bool better(const Candidate& a, const Candidate& b) {
  if (a.rejection.empty() != b.rejection.empty()) return a.rejection.empty();
  if (a.metrics.makespan != b.metrics.makespan) return a.metrics.makespan < b.metrics.makespan;
  auto peak = [](const Candidate& c) {
    int64_t p = 0;
    for (const RankMetrics& rm : c.metrics.ranks) p = std::max(p, rm.peak_bytes);
    return p;
  };
  return peak(a) < peak(b);
}

// The candidate that comes closest to the budget and what each short rank would need.
std::string over_budget_message(const Problem& problem, const std::vector<Candidate>& tried) {
  const Candidate* closest = nullptr;
  int64_t closest_need = 0;
  for (const Candidate& c : tried) {
    int64_t need = 0;
    for (const RankMetrics& rm : c.metrics.ranks) need = std::max(need, rm.peak_bytes);
    if (!closest || need < closest_need) {
      closest = &c;
      closest_need = need;
    }
  }
  std::vector<std::string> short_ranks;
  for (const RankMetrics& rm : closest->metrics.ranks) {
    if (rm.peak_bytes > rm.budget_bytes) {
      short_ranks.push_back(fmt::format("rank {} needs {} (budget {})", rm.rank,
                                        format_bytes_short(rm.peak_bytes),
                                        format_bytes_short(rm.budget_bytes)));
    }
  }
  return fmt::format(
      "no schedule fits the memory budget of {}: the closest, {}, needs {} bytes per rank ({}); "
      "raise it with --memory-budget {} or lower static_bytes",
      problem.name, closest->method, closest_need, fmt::join(short_ranks, ", "), closest_need);
}

}  // namespace

CompileResult compile(const Problem& problem, const std::string& method) {
  CompileOptions options;
  options.method = method;
  options.optimizer.time_limit_seconds = 0;
  return compile(problem, options);
}

CompileResult compile(const Problem& problem, const CompileOptions& options) {
  const std::string& method = options.method;
  CompileResult result;
  for (const Generator* generator : chosen_generators(problem, method)) {
    result.ranking.push_back(run_generator(problem, *generator));
  }
  if (result.ranking.empty()) {
    throw InputError("no method supports this profile; see `optpipe methods`");
  }
  std::stable_sort(result.ranking.begin(), result.ranking.end(), better);
  if (!result.ranking.front().rejection.empty()) {
    throw Error(kExitOverBudget, over_budget_message(problem, result.ranking));
  }
  result.best = result.ranking.front();
  if (options.on_improvement) {
    options.on_improvement(result.best.schedule, result.best.metrics,
                           result.best.metrics.lower_bound);
  }
  if (uses_optimizer(method) && options.optimizer.time_limit_seconds > 0) {
    OptimizeResult optimized =
        optimize(problem, result.best.schedule, options.optimizer, options.on_improvement);
    Candidate milp{"milp", std::move(optimized.schedule), {}, {}};
    milp.metrics = compute_metrics(problem, milp.schedule);
    raise_lower_bound(milp.metrics, optimized.stats.bound);
    raise_lower_bound(result.best.metrics, optimized.stats.bound);
    if (method == "milp" || milp.metrics.makespan < result.best.metrics.makespan) {
      result.best = milp;
      result.ranking.insert(result.ranking.begin(), milp);
    }
    result.solver = optimized.stats;
  }
  return result;
}

void override_budget(Problem& problem, const std::string& size) {
  const int64_t budget = parse_size(size, "--memory-budget");
  for (int r = 0; r < problem.ranks; ++r) {
    if (budget < problem.static_bytes[r]) {
      throw InputError(fmt::format(
          "--memory-budget: {} is below rank {}'s static bytes {}; a budget must hold at least "
          "the weights, gradients and optimizer state",
          size, r, format_bytes_short(problem.static_bytes[r])));
    }
    problem.budget_bytes[r] = budget;
  }
}

}  // namespace optpipe
