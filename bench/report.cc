#include "bench/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace optpipe::bench {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

const MethodResult* at(const CaseResult& c, int index) {
  return index < 0 ? nullptr : &c.generators[index];
}

// The optimiser's fastest result over the layouts at effort `limit`, or nullptr.
const MethodResult* optimizer_at(const CaseResult& c, double limit) {
  const MethodResult* best = nullptr;
  for (const MethodResult& r : c.optimizer) {
    if (!r.error.empty() || !r.feasible || r.effort != limit) continue;
    if (!best || r.makespan < best->makespan) best = &r;
  }
  return best;
}

// The optimiser's fastest result, over the layouts, at its largest effort, or nullptr.
const MethodResult* final_optimizer(const CaseResult& c) {
  double longest = -1;
  for (const MethodResult& r : c.optimizer) {
    if (r.error.empty() && r.feasible) longest = std::max(longest, r.effort);
  }
  return optimizer_at(c, longest);
}

// The least idle time any schedule can have, over the layouts of the optimiser's results at
// effort `limit`, or -1 where some layout has no such floor (recompute adds work).
double least_idle_floor(const CaseResult& c, double limit) {
  double least = -1;
  for (const MethodResult& r : c.optimizer) {
    if (!r.error.empty() || r.effort != limit) continue;
    if (r.idle_floor < 0) return -1;
    least = least < 0 ? r.idle_floor : std::min(least, r.idle_floor);
  }
  return least;
}

std::string cell(const MethodResult* r) {
  if (!r) return "—";
  return fmt::format("{} {:.1f} ({:.1f}%)", r->label(), r->makespan, 100 * r->idle_fraction);
}

std::string ratio(double x) {
  return x < 0 ? "—" : fmt::format("{:.3f}", x);
}

double median(std::vector<double> xs) {
  if (xs.empty()) return -1;
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

}  // namespace

double optimizer_idle_over_baseline(const CaseResult& c) {
  const MethodResult* milp = final_optimizer(c);
  const MethodResult* base = at(c, c.best_baseline);
  if (!milp || !base || base->idle_time <= 0) return -1;
  return milp->idle_time / base->idle_time;
}

double idle_floor_over_baseline(const CaseResult& c) {
  const MethodResult* milp = final_optimizer(c);
  const MethodResult* base = at(c, c.best_baseline);
  if (!milp || !base || milp->idle_floor < 0 || base->idle_time <= 0) return -1;
  return milp->idle_floor / base->idle_time;
}

double optimizer_makespan_over_seed(const CaseResult& c) {
  const MethodResult* milp = final_optimizer(c);
  const MethodResult* seed = at(c, c.seed);
  if (!milp || !seed) return -1;
  return milp->makespan / seed->makespan;
}

std::vector<TargetTallies> tally_targets(const std::vector<CaseResult>& cases) {
  constexpr double kTolerance = 1e-9;
  constexpr double kMaxGap = 0.03;
  constexpr double kMaxIdleOverBaseline = 0.5;
  constexpr double kTightBudget = 0.5;  // of 1F1B's activation peak
  std::set<double> limits;
  for (const CaseResult& c : cases) {
    for (const MethodResult& r : c.optimizer) limits.insert(r.effort);
  }
  std::vector<TargetTallies> tallies;
  for (const double limit : limits) {
    TargetTallies t;
    t.effort = limit;
    auto count = [](TargetTally& tally, bool met) {
      ++tally.cases;
      tally.met += met ? 1 : 0;
    };
    for (const CaseResult& c : cases) {
      const MethodResult* seed = at(c, c.seed);
      if (!seed) continue;
      const MethodResult* milp = optimizer_at(c, limit);
      count(t.never_worse_than_seed, milp && milp->makespan <= seed->makespan + kTolerance);
      if (c.budget_bytes.size() == 4) {  // one budget per rank
        count(t.gap_at_four_ranks, milp && milp->gap <= kMaxGap);
      }
      const MethodResult* base = at(c, c.best_baseline);
      if (c.budget_fraction <= kTightBudget && base && base->idle_time > 0) {
        const double half = kMaxIdleOverBaseline * base->idle_time;
        const bool met = milp && milp->idle_time <= half;
        count(t.half_the_idle_when_tight, met);
        const double floor = least_idle_floor(c, limit);
        if (floor <= half + kTolerance) count(t.half_the_idle_where_possible, met);
      }
    }
    tallies.push_back(t);
  }
  return tallies;
}

std::string targets_table(const std::vector<TargetTallies>& tallies) {
  std::string out = "| target |";
  std::string rule = "|---|";
  for (const TargetTallies& t : tallies) {
    out += fmt::format(" optimiser at effort {:g} |", t.effort);
    rule += "---|";
  }
  out += "\n" + rule + "\n";
  auto row = [&](const char* name, TargetTally TargetTallies::*tally) {
    out += fmt::format("| {} |", name);
    for (const TargetTallies& t : tallies) {
      out += fmt::format(" {} of {} |", (t.*tally).met, (t.*tally).cases);
    }
    out += "\n";
  };
  row("never worse than its seed", &TargetTallies::never_worse_than_seed);
  row("gap to the lower bound at most 3%, R = 4", &TargetTallies::gap_at_four_ranks);
  row("idle at most half the best baseline's, budgets at most 50%",
      &TargetTallies::half_the_idle_when_tight);
  row("the same where some schedule can meet it (floor at most half)",
      &TargetTallies::half_the_idle_where_possible);
  return out;
}

std::string summary_table(const std::vector<CaseResult>& cases) {
  std::string out =
      "| case | best published baseline: makespan (idle) | adaoffload | seed | optimiser (idle) "
      "wall | "
      "status | LB | gap | idle / baseline's | floor / baseline's | makespan / seed's |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const CaseResult& c : cases) {
    const MethodResult* milp = final_optimizer(c);
    const MethodResult* seed = at(c, c.seed);
    out += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", c.name,
        cell(at(c, c.best_baseline)),
        at(c, c.adaoffload) ? fmt::format("{:.1f}", at(c, c.adaoffload)->makespan) : "—",
        seed ? fmt::format("{} {:.1f}", seed->label(), seed->makespan) : "none fits",
        milp ? fmt::format("{:.1f} ({:.1f}%) {} {:.1f} s", milp->makespan,
                           100 * milp->idle_fraction, milp->variant, milp->seconds)
             : "—",
        milp ? milp->solver_status : "—",
        milp ? fmt::format("{:.1f} {}", milp->lower_bound, to_string(milp->lower_bound_source))
             : "—",
        milp ? fmt::format("{:.1f}%", 100 * milp->gap)
             : (seed ? fmt::format("{:.1f}%", 100 * seed->gap) : "—"),
        ratio(optimizer_idle_over_baseline(c)), ratio(idle_floor_over_baseline(c)),
        ratio(optimizer_makespan_over_seed(c)));
  }
  return out;
}

std::string method_table(const std::vector<CaseResult>& cases) {
  struct Tally {
    int runs = 0;
    int feasible = 0;
    int errors = 0;
    std::vector<double> over_best;  // makespan / the case's fastest generator that fits
    std::vector<double> idle;
    double max_seconds = 0;
  };
  std::map<std::string, Tally> tallies;
  for (const CaseResult& c : cases) {
    const MethodResult* best = at(c, c.seed);
    std::vector<const MethodResult*> all;
    for (const MethodResult& r : c.generators) all.push_back(&r);
    for (const MethodResult& r : c.optimizer) all.push_back(&r);
    for (const MethodResult* r : all) {
      Tally& t = tallies[r->label()];
      ++t.runs;
      t.max_seconds = std::max(t.max_seconds, r->seconds);
      if (!r->error.empty()) {
        ++t.errors;
        continue;
      }
      if (!r->feasible) continue;
      ++t.feasible;
      t.idle.push_back(100 * r->idle_fraction);
      if (best) t.over_best.push_back(r->makespan / best->makespan);
    }
  }
  std::string out =
      "| method/layout | cases | fits | errors | median makespan / best generator's | worst | "
      "median idle % | max compile s |\n|---|---|---|---|---|---|---|---|\n";
  for (const auto& [label, t] : tallies) {
    const double worst =
        t.over_best.empty() ? -1 : *std::max_element(t.over_best.begin(), t.over_best.end());
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {:.3f} |\n", label, t.runs, t.feasible,
                       t.errors, ratio(median(t.over_best)), ratio(worst),
                       t.idle.empty() ? "—" : fmt::format("{:.1f}", median(t.idle)), t.max_seconds);
  }
  return out;
}

std::string detail_table(const std::vector<CaseResult>& cases) {
  std::string out =
      "| case | method/layout | makespan | idle % | peak GiB / budget | feasible | offloads / R | "
      "compile s | LB | gap |\n|---|---|---|---|---|---|---|---|---|---|\n";
  for (const CaseResult& c : cases) {
    std::vector<const MethodResult*> all;
    for (const MethodResult& r : c.generators) all.push_back(&r);
    for (const MethodResult& r : c.optimizer) all.push_back(&r);
    for (const MethodResult* r : all) {
      if (!r->error.empty()) {
        out += fmt::format("| {} | {} | error: {} | | | no | | {:.3f} | | |\n", c.name, r->label(),
                           r->error.substr(0, 80), r->seconds);
        continue;
      }
      out += fmt::format(
          "| {} | {} | {:.1f} | {:.1f} | {:.1f} ({:.0f}%) | {} | {} / {} | {:.3f} | "
          "{:.1f} | {:.1f}% |\n",
          c.name, r->label(), r->makespan, 100 * r->idle_fraction, r->peak_bytes / kGiB,
          100 * r->peak_over_budget, r->feasible ? "yes" : "no", r->offloads, r->recomputes,
          r->seconds, r->lower_bound, 100 * r->gap);
    }
  }
  return out;
}

std::string large_case_compile_table(const std::vector<CaseResult>& cases, int ranks,
                                     int microbatches) {
  const std::string prefix = fmt::format("-R{}-m{}-", ranks, microbatches);
  std::map<std::string, std::pair<double, double>> range;  // label -> min, max seconds
  for (const CaseResult& c : cases) {
    if (c.profile.find(prefix) == std::string::npos) continue;
    for (const MethodResult& r : c.generators) {
      auto [it, fresh] = range.try_emplace(r.label(), r.seconds, r.seconds);
      if (!fresh) {
        it->second.first = std::min(it->second.first, r.seconds);
        it->second.second = std::max(it->second.second, r.seconds);
      }
    }
  }
  if (range.empty()) return "";
  std::string out = fmt::format(
      "| generator/layout (R = {}, m = {}) | min compile s | max compile s |\n|---|---|---|\n",
      ranks, microbatches);
  for (const auto& [label, mm] : range) {
    out += fmt::format("| {} | {:.3f} | {:.3f} |\n", label, mm.first, mm.second);
  }
  return out;
}

nlohmann::json to_json(const MethodResult& r) {
  nlohmann::json j = {{"method", r.method}, {"layout", r.variant}, {"seconds", r.seconds}};
  if (r.method == "milp") {
    j["effort"] = r.effort;
    j["reproducible"] = r.reproducible;
    j["solver_status"] = r.solver_status;
  }
  if (!r.error.empty()) {
    j["error"] = r.error;
    return j;
  }
  j.update({{"feasible", r.feasible},
            {"makespan", r.makespan},
            {"idle_fraction", r.idle_fraction},
            {"idle_time", r.idle_time},
            {"peak_bytes", r.peak_bytes},
            {"peak_over_budget", r.peak_over_budget},
            {"offloads", r.offloads},
            {"recomputes", r.recomputes},
            {"lower_bound", r.lower_bound},
            {"lower_bound_source", to_string(r.lower_bound_source)},
            {"gap", r.gap}});
  if (r.idle_floor >= 0) j["idle_floor"] = r.idle_floor;
  return j;
}

nlohmann::json to_json(const CaseResult& c) {
  nlohmann::json generators = nlohmann::json::array();
  for (const MethodResult& r : c.generators) generators.push_back(to_json(r));
  nlohmann::json optimizer = nlohmann::json::array();
  for (const MethodResult& r : c.optimizer) optimizer.push_back(to_json(r));
  auto label = [&](int i) -> nlohmann::json {
    return i < 0 ? nlohmann::json() : nlohmann::json(c.generators[i].label());
  };
  auto number = [](double x) -> nlohmann::json {
    return x < 0 ? nlohmann::json() : nlohmann::json(x);
  };
  return {{"case", c.name},
          {"profile", c.profile},
          {"budget_fraction", c.budget_fraction},
          {"budget_bytes", c.budget_bytes},
          {"generators", generators},
          {"optimizer", optimizer},
          {"seed", label(c.seed)},
          {"best_baseline", label(c.best_baseline)},
          {"adaoffload", label(c.adaoffload)},
          {"optimizer_idle_over_baseline", number(optimizer_idle_over_baseline(c))},
          {"idle_floor_over_baseline", number(idle_floor_over_baseline(c))},
          {"optimizer_makespan_over_seed", number(optimizer_makespan_over_seed(c))}};
}

nlohmann::json to_json(const TargetTallies& t) {
  auto tally = [](const TargetTally& x) {
    return nlohmann::json{{"met", x.met}, {"cases", x.cases}};
  };
  return {{"effort", t.effort},
          {"never_worse_than_seed", tally(t.never_worse_than_seed)},
          {"gap_at_most_3_percent_at_4_ranks", tally(t.gap_at_four_ranks)},
          {"half_the_idle_when_tight", tally(t.half_the_idle_when_tight)},
          {"half_the_idle_where_possible", tally(t.half_the_idle_where_possible)}};
}

}  // namespace optpipe::bench
