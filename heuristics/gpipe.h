// GPipe (docs/methods.md): all forwards, then all backwards.
#pragma once

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

Order gpipe_order(const Problem& problem);

}  // namespace optpipe
