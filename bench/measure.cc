#include "bench/measure.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>

#include "bounds/makespan_lower_bound.h"
#include "heuristics/registry.h"
#include "solver/optimizer.h"
#include "timing/metrics.h"
#include "timing/simulator.h"
#include "timing/validator.h"

namespace optpipe::bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Fills the measured fields of `result` from a timed schedule.
void describe_schedule(const Problem& problem, const Schedule& schedule, const Metrics& metrics,
                       MethodResult& result) {
  result.feasible = !validate(problem, schedule).has_value();
  result.makespan = metrics.makespan;
  result.idle_fraction = metrics.idle_fraction;
  double busy = 0;
  for (const RankMetrics& rm : metrics.ranks) {
    busy += rm.busy;
    result.peak_bytes = std::max(result.peak_bytes, rm.peak_bytes);
    result.peak_over_budget =
        std::max(result.peak_over_budget, static_cast<double>(rm.peak_bytes) / rm.budget_bytes);
  }
  result.idle_time = problem.ranks * metrics.makespan - busy;
  result.lower_bound = metrics.lower_bound;
  result.lower_bound_source = metrics.lower_bound_source;
  result.gap = metrics.gap;
  if (!problem.any_stage_can_recompute()) {
    result.idle_floor = problem.ranks * metrics.lower_bound - busy;
  }
  result.offloads = 0;
  result.recomputes = 0;
  for (const auto& actions : schedule.ranks) {
    for (const Action& a : actions) {
      result.offloads += a.ref.op == Op::kOffload ? 1 : 0;
      result.recomputes += a.ref.op == Op::kRecompute ? 1 : 0;
    }
  }
}

// Faster first; ties go to the lower peak (as the compile driver ranks methods).
bool faster(const MethodResult& a, const MethodResult& b) {
  if (a.makespan != b.makespan) return a.makespan < b.makespan;
  return a.peak_bytes < b.peak_bytes;
}

MethodResult run_optimizer(const Variant& variant, const LowerBound& lower_bound,
                           const Schedule& seed, double effort, const MeasureOptions& options) {
  MethodResult r;
  r.method = "milp";
  r.variant = variant.name;
  r.effort = effort;
  OptimizerOptions optimizer;
  optimizer.effort = effort;
  optimizer.time_limit_seconds = options.time_cap_seconds;
  optimizer.threads = options.threads;
  optimizer.search_seed = options.search_seed;
  optimizer.lower_bound = lower_bound;
  const auto start = Clock::now();
  try {
    const OptimizeResult result = optimize(variant.problem, seed, optimizer, nullptr);
    r.seconds = seconds_since(start);  // its own run
    r.reproducible = result.stats.reproducible();
    Metrics metrics = compute_metrics(variant.problem, result.schedule, lower_bound);
    raise_lower_bound(metrics, {result.stats.bound, BoundSource::kSolver});
    describe_schedule(variant.problem, result.schedule, metrics, r);
    r.solver_status = to_string(result.stats.status);
  } catch (const std::exception& e) {
    r.error = e.what();
    r.seconds = seconds_since(start);
  }
  return r;
}

}  // namespace

bool is_published_baseline(const std::string& method) {
  static const std::vector<std::string> kBaselines = {"zb-auto", "zb-v",        "v-half",
                                                      "v-min",   "pipeoffload", "1f1b",
                                                      "zb-h1",   "zb-h2",       "interleaved-1f1b"};
  return std::find(kBaselines.begin(), kBaselines.end(), method) != kBaselines.end();
}

std::string MethodResult::label() const {
  if (method == "milp") return fmt::format("milp@e{:g}/{}", effort, variant);
  return fmt::format("{}/{}", method, variant);
}

CaseResult measure_case(const BenchCase& bench_case, const MeasureOptions& options) {
  CaseResult out;
  out.name = bench_case.name();
  out.profile = bench_case.profile.name;
  out.budget_fraction = bench_case.budget_fraction;
  out.budget_bytes = bench_case.budget_bytes;

  std::vector<Schedule> schedules;  // parallel to out.generators
  // Per variant, computed once: about 1 s at R = 32, m = 256, which would
  // otherwise count in every generator's time.
  std::vector<LowerBound> lower_bounds;
  for (const Variant& variant : bench_case.variants) {
    const LowerBound lower_bound = makespan_lower_bound(variant.problem);
    lower_bounds.push_back(lower_bound);
    for (const Generator& generator : generators()) {
      if (!generator.unsupported_reason(variant.problem).empty()) continue;
      MethodResult r;
      r.method = std::string(generator.name);
      r.variant = variant.name;
      Schedule schedule;
      const auto start = Clock::now();
      try {
        schedule =
            simulate_within_budget(variant.problem, generator.build(variant.problem), r.method);
        const Metrics metrics = compute_metrics(variant.problem, schedule, lower_bound);
        describe_schedule(variant.problem, schedule, metrics, r);
      } catch (const std::exception& e) {
        r.error = e.what();
      }
      r.seconds = seconds_since(start);
      out.generators.push_back(r);
      schedules.push_back(std::move(schedule));
    }
  }

  auto pick = [&](auto&& wanted) {
    int best = -1;
    for (int i = 0; i < static_cast<int>(out.generators.size()); ++i) {
      const MethodResult& r = out.generators[i];
      if (!r.error.empty() || !r.feasible || !wanted(r)) continue;
      if (best < 0 || faster(r, out.generators[best])) best = i;
    }
    return best;
  };
  out.seed = pick([](const MethodResult&) { return true; });
  out.best_baseline = pick([](const MethodResult& r) { return is_published_baseline(r.method); });
  out.adaoffload = pick([](const MethodResult& r) { return r.method == "adaoffload"; });

  // The optimiser on every layout, from that layout's fastest schedule that fits: which layout
  // it can shorten most is not the one whose generators start fastest.
  for (const double effort : options.milp_efforts) {
    for (size_t v = 0; v < bench_case.variants.size(); ++v) {
      const Variant& variant = bench_case.variants[v];
      const int seed = pick([&](const MethodResult& r) { return r.variant == variant.name; });
      if (seed < 0) continue;
      out.optimizer.push_back(
          run_optimizer(variant, lower_bounds[v], schedules[seed], effort, options));
    }
  }
  return out;
}

}  // namespace optpipe::bench
