#include "driver/compile_driver.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "bounds/makespan_lower_bound.h"
#include "driver/schedule_cache.h"
#include "formats/profile.h"
#include "formats/units.h"
#include "heuristics/registry.h"
#include "model/errors.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe {

namespace {

// Budget probes read whether a schedule fits, its makespan and its peaks, never its bound: they
// rank the generators with the trivial bound, 0, instead of makespan_lower_bound, which takes about
// 1 s per budget at R = 32, m = 256.
constexpr LowerBound kTrivialBound{};

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

// `lower_bound`: the bound the candidate's metrics report (makespan_lower_bound(problem), computed
// once for all the generators, or kTrivialBound where nothing reads it).
Candidate run_generator(const Problem& problem, const Generator& generator,
                        const LowerBound& lower_bound) {
  Candidate candidate;
  candidate.method = generator.name;
  candidate.schedule = simulate_within_budget(problem, generator.build(problem), candidate.method);
  candidate.metrics = compute_metrics(problem, candidate.schedule, lower_bound);
  if (const auto violation = validate(problem, candidate.schedule)) {
    if (candidate.metrics.within_budget) {
      // Only the budget may reject a generator's schedule; anything else is a bug in it.
      throw Error(ErrorKind::kInternal, fmt::format("{} produced an invalid schedule: {}",
                                                    generator.name, violation->message));
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

int64_t highest_peak(const Candidate& c) {
  int64_t peak = 0;
  for (const RankMetrics& rm : c.metrics.ranks) peak = std::max(peak, rm.peak_bytes);
  return peak;
}

// Every chosen generator's schedule: usable ones by makespan (ties: lower peak), then the rest.
// `lower_bound`: as for run_generator. Once `stop` says so (the time limit, an interrupt), the
// generators not yet run are skipped, as soon as one schedule fits; `skipped` counts them.
std::vector<Candidate> rank_generators(const Problem& problem, const std::string& method,
                                       const LowerBound& lower_bound,
                                       const std::function<bool()>& stop = nullptr,
                                       int* skipped = nullptr) {
  std::vector<Candidate> ranking;
  const std::vector<const Generator*> chosen = chosen_generators(problem, method);
  bool fits = false;
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (fits && stop && stop()) {
      if (skipped) *skipped = static_cast<int>(chosen.size() - i);
      break;
    }
    ranking.push_back(run_generator(problem, *chosen[i], lower_bound));
    fits = fits || ranking.back().rejection.empty();
  }
  if (ranking.empty()) throw InputError("no method supports this profile; see `optpipe methods`");
  std::stable_sort(ranking.begin(), ranking.end(), better);
  return ranking;
}

Problem with_uniform_budget(const Problem& problem, int64_t budget) {
  Problem copy = problem;
  copy.budget_bytes.assign(problem.ranks, budget);
  return copy;
}

// The candidate that comes closest to the budget, the ranks it leaves short, and the smallest
// budget at which some method of `method` would fit.
std::string over_budget_message(const Problem& problem, const std::string& method,
                                const std::vector<Candidate>& tried,
                                const std::function<bool()>& stop) {
  const Candidate* closest = &tried.front();
  for (const Candidate& c : tried) {
    if (highest_peak(c) < highest_peak(*closest)) closest = &c;
  }
  // The first few ranks that do not fit, and how many more: one readable line at any R.
  constexpr int kRanksNamed = 4;
  std::vector<std::string> short_ranks;
  int unnamed = 0;
  for (const RankMetrics& rm : closest->metrics.ranks) {
    if (rm.peak_bytes <= rm.budget_bytes) continue;
    if (static_cast<int>(short_ranks.size()) == kRanksNamed) {
      ++unnamed;
      continue;
    }
    short_ranks.push_back(fmt::format("rank {} needs {} (budget {})", rm.rank,
                                      format_bytes_short(rm.peak_bytes),
                                      format_bytes_short(rm.budget_bytes)));
  }
  if (unnamed > 0) short_ranks.push_back(fmt::format("and {} more ranks", unnamed));
  const FeasibleBudget smallest =
      smallest_feasible_budget(problem, method, stop, highest_peak(*closest));
  std::string fix = "no budget makes it fit (an activation larger than the device?)";
  if (smallest.bytes) {
    fix = fmt::format("{} fits {} --memory-budget {} ({}){}", method,
                      smallest.cut_short ? "at" : "from", *smallest.bytes,
                      format_bytes_short(*smallest.bytes),
                      smallest.cut_short ? "; the time limit or an interrupt ended the search "
                                           "for a smaller budget"
                                         : "");
  }
  return fmt::format("no schedule fits the memory budget of {}: the closest, {}, leaves {}; {}",
                     problem.name, closest->method, fmt::join(short_ranks, ", "), fix);
}

}  // namespace

CompileResult compile(const Problem& problem, const std::string& method) {
  CompileOptions options;
  options.method = method;
  options.optimizer.time_limit_seconds = 0;
  return compile(problem, options);
}

CompileResult compile(const Problem& problem, const CompileOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  const std::string& method = options.method;
  CompileResult result;
  // --time-limit bounds the bound and the generators too: past it, or after an interrupt, the
  // bound's longest part ends early and the methods not yet tried are skipped once one schedule
  // fits.
  const double limit = options.optimizer.time_limit_seconds;
  const auto elapsed = [started] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  const auto stop = [&] {
    return (limit > 0 && elapsed() >= limit) ||
           (options.optimizer.interrupted && options.optimizer.interrupted());
  };
  // The bound depends on the problem alone, and takes about 1 s at R = 32,
  // m = 256: computed once for every schedule measured here and for the optimiser.
  bool bound_cut_short = false;
  const LowerBound lower_bound = makespan_lower_bound(problem, [&] {
    bound_cut_short = bound_cut_short || stop();
    return bound_cut_short;
  });
  if (bound_cut_short) {
    result.warnings.push_back(
        "the lower bound was cut short by the time limit or an interrupt: it is valid "
        "but may be lower than it would be");
    result.cut_short = true;
  }
  int& skipped = result.generators_skipped;
  result.ranking = rank_generators(problem, method, lower_bound, stop, &skipped);
  if (skipped > 0) {
    result.cut_short = true;
    result.warnings.push_back(fmt::format(
        "{} of the methods were not tried: the time limit had passed or an interrupt came",
        skipped));
  }
  std::optional<ScheduleCache> cache;
  std::optional<CachedSchedule> cached;
  if (!options.cache_dir.empty()) {
    try {
      cache.emplace(options.cache_dir, options.optimizer.effort);
      cached = cache->find(problem, method);
    } catch (const InputError& e) {
      result.warnings.push_back(std::string(e.what()) + "; compiling without it");
      cache.reset();
    }
  }
  if (cached) {
    Candidate hit{
        "cache", cached->schedule, compute_metrics(problem, cached->schedule, lower_bound), {}};
    result.ranking.insert(result.ranking.begin(), std::move(hit));
    std::stable_sort(result.ranking.begin(), result.ranking.end(), better);
  }
  if (!result.ranking.front().rejection.empty()) {
    result.status = CompileStatus::kOverBudget;
    result.over_budget_message = over_budget_message(problem, method, result.ranking, stop);
    return result;
  }
  result.best = result.ranking.front();
  if (options.on_improvement) {
    options.on_improvement(result.best.schedule, result.best.metrics);
  }
  // A stored schedule ends the compile only where it meets the lower bound: what its file says
  // of its status is not taken on trust.
  const bool settled =
      cached && cached->final && result.best.method == "cache" && result.best.metrics.gap <= 1e-9;
  // What the bound and the generators left of the time limit.
  const double remaining = limit - elapsed();
  if (uses_optimizer(method) && limit > 0 && !settled) {
    OptimizerOptions optimizer = options.optimizer;
    optimizer.time_limit_seconds = std::max(remaining, 0.0);
    optimizer.lower_bound = lower_bound;
    OptimizeResult optimized =
        optimize(problem, result.best.schedule, optimizer, options.on_improvement);
    Candidate milp{"milp", std::move(optimized.schedule), {}, {}};
    milp.metrics = compute_metrics(problem, milp.schedule, lower_bound);
    const LowerBound solver_bound{optimized.stats.bound, BoundSource::kSolver};
    raise_lower_bound(milp.metrics, solver_bound);
    raise_lower_bound(result.best.metrics, solver_bound);
    // A seed without the offloads or recomputes it did not need is as fast and moves less.
    const bool pruned = optimized.stats.offloads_dropped + optimized.stats.recomputes_dropped > 0;
    if (method == "milp" || pruned || milp.metrics.makespan < result.best.metrics.makespan) {
      result.best = milp;
      result.ranking.insert(result.ranking.begin(), milp);
    }
    result.solver = optimized.stats;
    result.cut_short = result.cut_short || !optimized.stats.reproducible();
  }
  if (cache) {
    try {
      cache->store(problem, method, result.best.schedule, result.best.metrics,
                   result.solver ? &*result.solver : nullptr);
    } catch (const InputError& e) {
      result.warnings.push_back(std::string(e.what()) + "; the result is not cached");
    }
  }
  return result;
}

FeasibleBudget smallest_feasible_budget(const Problem& problem, const std::string& method,
                                        const std::function<bool()>& stop,
                                        std::optional<int64_t> guess) {
  // A probe asks only whether some generator fits: it stops at the first that does.
  const auto at_first_fit = [] { return true; };
  auto fits = [&](int64_t budget) {
    const Problem at_budget = with_uniform_budget(problem, budget);
    return rank_generators(at_budget, method, kTrivialBound, at_first_fit)
        .front()
        .rejection.empty();
  };
  int64_t lo = *std::max_element(problem.static_bytes.begin(), problem.static_bytes.end());
  // Every activation of a rank live at once: GPipe's peak, enough for any order.
  int64_t hi = lo;
  for (int r = 0; r < problem.ranks; ++r) {
    int64_t all = problem.static_bytes[r];
    for (int s : problem.stages_of_rank(r)) all += problem.stages[s].activation_bytes;
    hi = std::max(hi, all * std::max(1, problem.microbatches));
  }
  FeasibleBudget found;
  if (guess && *guess > lo && *guess < hi && fits(*guess)) {
    hi = *guess;
  } else if (!fits(hi)) {
    return found;
  }
  // hi can be thousands of times the answer (every microbatch's activations): the probes halve
  // the ratio hi / lo, not the difference, and end within 0.1% of the answer (at least 1 MiB),
  // in about a dozen probes.
  while (hi - lo > std::max<int64_t>(int64_t{1} << 20, hi / 1000)) {
    if (stop && stop()) {
      found.cut_short = true;
      break;
    }
    const double geometric = std::sqrt(static_cast<double>(std::max<int64_t>(lo, 1))) *
                             std::sqrt(static_cast<double>(hi));
    const int64_t mid = std::clamp(static_cast<int64_t>(geometric), lo + (hi - lo) / 64,
                                   hi - (hi - lo) / 64);
    (fits(mid) ? hi : lo) = mid;
  }
  found.bytes = hi;
  return found;
}

std::vector<FrontierPoint> memory_frontier(const Problem& problem, int points) {
  std::vector<FrontierPoint> frontier;
  const std::optional<int64_t> smallest = smallest_feasible_budget(problem, "auto").bytes;
  if (!smallest) return frontier;
  // 1F1B's peak, or that of its counterpart with several chunks (ZB-V has 1F1B's peak).
  const char* reference = problem.chunks_per_rank == 1                  ? "1f1b"
                          : problem.placement == PlacementKind::kVShape ? "zb-v"
                                                                        : "interleaved-1f1b";
  int64_t largest = *smallest;
  const Generator* generator = find_generator(reference);
  if (generator && generator->unsupported_reason(problem).empty()) {
    largest = std::max(largest, highest_peak(run_generator(problem, *generator, kTrivialBound)));
  }
  points = std::max(points, 1);
  for (int i = 0; i < points; ++i) {
    const int64_t budget =
        points == 1 ? largest : *smallest + (largest - *smallest) * i / (points - 1);
    const Problem at_budget = with_uniform_budget(problem, budget);
    const Candidate best = rank_generators(at_budget, "auto", kTrivialBound).front();
    frontier.push_back({budget, best.method, best.metrics.makespan, best.rejection.empty()});
  }
  return frontier;
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
