#include "heuristics/warmup_steady_cooldown.h"

namespace optpipe {

std::vector<OpRef> warmup_steady_cooldown(const std::vector<OpRef>& forwards,
                                          const std::vector<OpRef>& backwards, int warmup) {
  std::vector<OpRef> refs(forwards.begin(), forwards.begin() + warmup);
  size_t next_backward = 0;
  for (size_t f = warmup; f < forwards.size(); ++f) {
    refs.push_back(forwards[f]);
    refs.push_back(backwards[next_backward++]);
  }
  refs.insert(refs.end(), backwards.begin() + next_backward, backwards.end());
  return refs;
}

}  // namespace optpipe
