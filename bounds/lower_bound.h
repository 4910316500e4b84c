// A makespan lower bound with the argument that decides it (docs/semantics.md, Metrics:
// lower_bound), so that a user reading a large gap knows what holds the bound where it is.
#pragma once

namespace optpipe {

enum class BoundSource {
  kCriticalPath,     // one microbatch's ops through all stages and back
  kSequencing,       // a rank's F, B and W ops between their heads and tails
  kMemoryPacing,     // the same, with Fs waiting for room on their rank
  kRecomputeTime,    // the same, with the R time the rank's memory needs
  kDeferredWeights,  // the same, with Ws that the rank's memory keeps from waiting to the end
  kMemory,           // the activations' area and whole time under the budget
  kSolver,           // CBC's proven bound
};

const char* to_string(BoundSource source);

struct LowerBound {
  double value = 0;
  BoundSource source = BoundSource::kCriticalPath;
};

// The higher of the two; `a` on a tie.
inline LowerBound higher(const LowerBound& a, const LowerBound& b) {
  return b.value > a.value ? b : a;
}

}  // namespace optpipe
