#include "issue_order.h"

#include <cstddef>
#include <limits>

#include "schedule_data.h"

namespace optpipe::rt {

// The schedule's order (predicted start), except that a transfer goes right after the last
// compute op that ends by its predicted start, where the compiler's simulator issued it
// (optpipe::order_of). Issued after a compute op that starts with it, or runs while it waits for
// its copy channel, it would start only once that op ends. Compute ops run one at a time, so only
// the last one listed can end after a later transfer. An offload never goes before the F it
// copies, whatever rounding did to the predicted times.
std::vector<size_t> issue_order(const std::vector<optpipe_rt_action>& actions) {
  std::vector<size_t> order;
  order.reserve(actions.size());
  size_t last_compute = 0;  // position in `order` of the last compute op so far
  double last_end = -std::numeric_limits<double>::infinity();
  auto copies_last = [&](const optpipe_rt_action& t) {
    const optpipe_rt_action& f = actions[order[last_compute]];
    return t.op == OPTPIPE_RT_OP_OFFLOAD && f.op == OPTPIPE_RT_OP_F && f.stage == t.stage &&
           f.microbatch == t.microbatch;
  };
  for (size_t i = 0; i < actions.size(); ++i) {
    const optpipe_rt_action& a = actions[i];
    if (!is_compute_op(a.op) && a.start < last_end && !copies_last(a)) {
      order.insert(order.begin() + static_cast<std::ptrdiff_t>(last_compute++), i);
      continue;
    }
    if (is_compute_op(a.op)) {
      last_compute = order.size();
      last_end = a.end;
    }
    order.push_back(i);
  }
  return order;
}

}  // namespace optpipe::rt
