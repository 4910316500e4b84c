#include "cli/runtime_host_pool.h"

#include <fmt/format.h>

#include <memory>
#include <string>

#include "formats/opsched.h"
#include "model/errors.h"
#include "optpipe_rt.h"

namespace optpipe {

std::vector<int64_t> runtime_host_pool_bytes(const Problem& problem, const Schedule& schedule) {
  const std::string bytes = encode_opsched(problem, schedule);
  optpipe_rt_schedule* opened = nullptr;
  if (optpipe_rt_schedule_open_memory(bytes.data(), bytes.size(), &opened) != OPTPIPE_RT_OK) {
    throw Error(ErrorKind::kInvalidSchedule,
                fmt::format("the runtime shim cannot run it: {}", optpipe_rt_last_error()));
  }
  const std::unique_ptr<optpipe_rt_schedule, void (*)(optpipe_rt_schedule*)> guard(
      opened, optpipe_rt_schedule_close);
  std::vector<int64_t> pools;
  for (int r = 0; r < problem.ranks; ++r) {
    optpipe_rt_rank_info info{};
    if (optpipe_rt_schedule_get_rank(opened, r, &info) != OPTPIPE_RT_OK) {
      throw Error(ErrorKind::kInternal, optpipe_rt_last_error());
    }
    pools.push_back(info.host_pool_bytes);
  }
  return pools;
}

}  // namespace optpipe
