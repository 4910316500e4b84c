// The shape shared by 1F1B-style schedules: `warmup` forwards, then one forward and one backward
// alternately, then the remaining backwards.
#pragma once

#include <vector>

#include "model/schedule.h"

namespace optpipe {

std::vector<OpRef> warmup_steady_cooldown(const std::vector<OpRef>& forwards,
                                          const std::vector<OpRef>& backwards, int warmup);

}  // namespace optpipe
