// What the optimiser reports about its run (docs/design.md §8: the summary's `solver` object).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace optpipe {

struct SolverStats {
  std::string status;    // optimal, improved, seed_kept
  std::string note;      // what limited the search, if anything
  double objective = 0;  // makespan of the returned schedule
  double bound = 0;      // proven lower bound on the makespan
  double gap = 0;
  double seconds = 0;
  int nodes = 0;
  int windows = 0;  // windows re-optimised
  int windows_improved = 0;
  // Offloads and recomputes the search's schedule had and did not need
  // (heuristics/offload_recompute_pruning.h)
  int offloads_dropped = 0;
  int recomputes_dropped = 0;
};

inline nlohmann::json to_json(const SolverStats& s) {
  nlohmann::json j = {{"status", s.status},
                      {"objective", s.objective},
                      {"bound", s.bound},
                      {"gap", s.gap},
                      {"seconds", s.seconds},
                      {"nodes", s.nodes},
                      {"windows", s.windows},
                      {"windows_improved", s.windows_improved},
                      {"offloads_dropped", s.offloads_dropped},
                      {"recomputes_dropped", s.recomputes_dropped}};
  if (!s.note.empty()) j["note"] = s.note;
  return j;
}

}  // namespace optpipe
