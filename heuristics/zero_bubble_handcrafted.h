// ZB-H1 and ZB-H2 (docs/methods.md): Zero Bubble's handcrafted schedules, the backward split into B
// and W, with W filling the bubbles.
#pragma once

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

Order zb_h1_order(const Problem& problem);
Order zb_h2_order(const Problem& problem);

}  // namespace optpipe
