// What the optimiser reports about its run (docs/design.md §8: the summary's `solver` object).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace optpipe {

// What the search came to.
enum class SearchStatus {
  kOptimal,   // the schedule meets the proven lower bound
  kImproved,  // faster than the seed
  kSeedKept,  // nothing faster was found
};

// Why the search stopped. Only kTimeLimit and kInterrupted depend on the machine: the other
// reasons give the same schedule bytes on any machine (docs/solver.md, Reproducible compiles).
enum class StopReason {
  kWorkDone,       // the work budget of --effort is spent
  kProvenOptimal,  // the schedule meets the lower bound
  kTargetGap,      // within --gap of the lower bound
  kTimeLimit,      // --time-limit came first: the result depends on the machine's speed
  kInterrupted,    // SIGINT or SIGTERM: the best schedule so far
};

// What CBC did: ran on the whole order or on windows of it, or was skipped, and why.
enum class CbcUse {
  kNotReached,           // the search stopped before it
  kWholeOrder,           // one MILP over the whole order, activation choices included
  kWindows,              // windows of microbatches re-optimised, the rest of the order kept
  kSkippedTimeSpan,      // the ops' times span too widely for CBC's LPs
  kSkippedActivations,   // windows keep offloads and recomputes, and the order moves some
  kSkippedModelSize,     // the model's root would take more than --effort allows
};

const char* to_string(SearchStatus status);
const char* to_string(StopReason reason);
const char* to_string(CbcUse use);

// The work the search did, counted as its budget is (docs/solver.md): the same on any machine
// unless the stop reason is the time limit or an interrupt.
struct SearchWork {
  int64_t policy_timings = 0;  // list-policy runs
  int64_t search_steps = 0;    // local-search moves tried
  int64_t cbc_iterations = 0;  // CBC's simplex iterations, roots included
};

struct SolverStats {
  SearchStatus status = SearchStatus::kSeedKept;
  StopReason stop_reason = StopReason::kWorkDone;
  CbcUse cbc = CbcUse::kNotReached;
  std::string note;      // more on what limited the search, if anything
  double objective = 0;  // makespan of the returned schedule
  double bound = 0;      // proven lower bound on the makespan
  double gap = 0;
  double seconds = 0;  // wall time: printed, never written to a file (files are reproducible)
  SearchWork work;
  int nodes = 0;
  int windows = 0;  // windows re-optimised
  int windows_improved = 0;
  // Offloads and recomputes the search's schedule had and did not need
  // (heuristics/offload_recompute_pruning.h)
  int offloads_dropped = 0;
  int recomputes_dropped = 0;

  // Whether the same profile and flags give the same result on any machine.
  bool reproducible() const {
    return stop_reason != StopReason::kTimeLimit && stop_reason != StopReason::kInterrupted;
  }
};

inline const char* to_string(SearchStatus status) {
  switch (status) {
    case SearchStatus::kOptimal:
      return "optimal";
    case SearchStatus::kImproved:
      return "improved";
    case SearchStatus::kSeedKept:
      return "seed_kept";
  }
  return "seed_kept";
}

inline const char* to_string(StopReason reason) {
  switch (reason) {
    case StopReason::kWorkDone:
      return "work_done";
    case StopReason::kProvenOptimal:
      return "proven_optimal";
    case StopReason::kTargetGap:
      return "target_gap";
    case StopReason::kTimeLimit:
      return "time_limit";
    case StopReason::kInterrupted:
      return "interrupted";
  }
  return "work_done";
}

inline const char* to_string(CbcUse use) {
  switch (use) {
    case CbcUse::kNotReached:
      return "not_reached";
    case CbcUse::kWholeOrder:
      return "whole_order";
    case CbcUse::kWindows:
      return "windows";
    case CbcUse::kSkippedTimeSpan:
      return "skipped_time_span";
    case CbcUse::kSkippedActivations:
      return "skipped_activations";
    case CbcUse::kSkippedModelSize:
      return "skipped_model_size";
  }
  return "not_reached";
}

// Wall time stays out: a file written from these stats is the same on any machine.
inline nlohmann::json to_json(const SolverStats& s) {
  nlohmann::json j = {{"status", to_string(s.status)},
                      {"stop_reason", to_string(s.stop_reason)},
                      {"reproducible", s.reproducible()},
                      {"cbc", to_string(s.cbc)},
                      {"objective", s.objective},
                      {"bound", s.bound},
                      {"gap", s.gap},
                      {"work",
                       {{"policy_timings", s.work.policy_timings},
                        {"search_steps", s.work.search_steps},
                        {"cbc_iterations", s.work.cbc_iterations}}},
                      {"nodes", s.nodes},
                      {"windows", s.windows},
                      {"windows_improved", s.windows_improved},
                      {"offloads_dropped", s.offloads_dropped},
                      {"recomputes_dropped", s.recomputes_dropped}};
  if (!s.note.empty()) j["note"] = s.note;
  return j;
}

}  // namespace optpipe
