// Every schedule generator optpipe knows, by name (docs/design.md §5, docs/methods.md).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "model/problem.h"
#include "model/schedule.h"

namespace optpipe {

struct Generator {
  std::string_view name;
  std::string_view summary;    // its memory/bubble trade-off, one line
  std::string_view reference;  // where it comes from
  // Why the generator cannot serve this problem, or empty when it can.
  std::function<std::string(const Problem&)> unsupported_reason;
  std::function<Order(const Problem&)> build;
};

const std::vector<Generator>& generators();
// nullptr when no generator has this name.
const Generator* find_generator(std::string_view name);

}  // namespace optpipe
