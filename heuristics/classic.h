// Classic schedules from the literature, as per-rank op orders (docs/methods.md).
#pragma once

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

Order gpipe_order(const Problem& problem);
Order one_f_one_b_order(const Problem& problem);
Order interleaved_1f1b_order(const Problem& problem);
Order zb_h1_order(const Problem& problem);
Order zb_h2_order(const Problem& problem);

}  // namespace optpipe
