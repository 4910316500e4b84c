#include "solver/microbatch_order.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

namespace optpipe {

namespace {

bool interchangeable(Op op) {
  return op == Op::kBackwardWeight || op == Op::kOffload || op == Op::kReload;
}

// Relabels one rank's list; `ref_of` gives an element's OpRef.
template <typename Element, typename RefOf>
void relabel_rank(std::vector<Element>& list, RefOf ref_of) {
  std::map<std::pair<Op, int>, std::vector<OpRef*>> groups;  // (op, stage) -> refs, in list order
  for (Element& element : list) {
    OpRef& ref = ref_of(element);
    if (interchangeable(ref.op)) groups[{ref.op, ref.stage}].push_back(&ref);
  }
  for (auto& [key, refs] : groups) {
    std::vector<int> microbatches;
    microbatches.reserve(refs.size());
    for (const OpRef* ref : refs) microbatches.push_back(ref->microbatch);
    std::sort(microbatches.begin(), microbatches.end());
    for (size_t i = 0; i < refs.size(); ++i) refs[i]->microbatch = microbatches[i];
  }
}

}  // namespace

Order in_microbatch_order(Order order) {
  for (auto& refs : order.ranks) relabel_rank(refs, [](OpRef& ref) -> OpRef& { return ref; });
  return order;
}

Schedule in_microbatch_order(Schedule schedule) {
  for (auto& actions : schedule.ranks) {
    relabel_rank(actions, [](Action& action) -> OpRef& { return action.ref; });
  }
  return schedule;
}

}  // namespace optpipe
