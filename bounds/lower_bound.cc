#include "bounds/lower_bound.h"

namespace optpipe {

const char* to_string(BoundSource source) {
  switch (source) {
    case BoundSource::kCriticalPath:
      return "critical_path";
    case BoundSource::kSequencing:
      return "sequencing";
    case BoundSource::kMemoryPacing:
      return "memory_pacing";
    case BoundSource::kRecomputeTime:
      return "recompute_time";
    case BoundSource::kDeferredWeights:
      return "deferred_weights";
    case BoundSource::kMemory:
      return "memory";
    case BoundSource::kSolver:
      return "solver";
  }
  return "unknown";
}

}  // namespace optpipe
