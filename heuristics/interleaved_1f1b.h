// Interleaved 1F1B, Megatron-LM (docs/methods.md): 1F1B over v chunks per rank.
#pragma once

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

Order interleaved_1f1b_order(const Problem& problem);

}  // namespace optpipe
