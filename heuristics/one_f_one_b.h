// 1F1B, PipeDream-Flush (docs/methods.md): one forward, one backward in the steady state.
#pragma once

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

Order one_f_one_b_order(const Problem& problem);

}  // namespace optpipe
