#include "bounds/makespan_lower_bound.h"

#include "bounds/memory_bound.h"
#include "bounds/microbatch_paths.h"
#include "bounds/sequencing_bound.h"

namespace optpipe {

namespace {

// One microbatch's critical path: all F, all B back, then W of stage 0.
double critical_path_bound(const Problem& problem) {
  return microbatch_paths(problem).round_trip[0] + problem.stages[0].backward_weight;
}

}  // namespace

LowerBound makespan_lower_bound(const Problem& problem, const std::function<bool()>& stop) {
  const LowerBound critical_path{critical_path_bound(problem), BoundSource::kCriticalPath};
  const LowerBound memory{memory_bound(problem), BoundSource::kMemory};
  const LowerBound known = higher(critical_path, memory);
  // On a tie the sequencing bound names the source (docs/semantics.md).
  return higher(sequencing_bound(problem, known.value, stop), known);
}

}  // namespace optpipe
