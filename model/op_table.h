// Dense per-(op, stage, microbatch) storage, the index every pass over a schedule uses.
#pragma once

#include <vector>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

template <typename T>
class OpTable {
 public:
  OpTable(const Problem& problem, T initial)
      : stages_(problem.num_stages()),
        microbatches_(problem.microbatches),
        cells_(static_cast<size_t>(kNumOps) * stages_ * microbatches_, initial) {}

  // Caller guarantees the reference is in range (see in_range).
  T& operator[](const OpRef& ref) { return cells_[index(ref)]; }
  const T& operator[](const OpRef& ref) const { return cells_[index(ref)]; }

 private:
  size_t index(const OpRef& ref) const {
    return (static_cast<size_t>(ref.op) * stages_ + ref.stage) * microbatches_ + ref.microbatch;
  }
  int stages_;
  int microbatches_;
  std::vector<T> cells_;
};

inline bool in_range(const Problem& problem, const OpRef& ref) {
  return ref.stage >= 0 && ref.stage < problem.num_stages() && ref.microbatch >= 0 &&
         ref.microbatch < problem.microbatches;
}

}  // namespace optpipe
