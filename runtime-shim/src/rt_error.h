// Inside the shim, failures are RtError exceptions carrying the ABI status; optpipe_rt.cc turns
// them into a status and a thread-local message at the boundary.
#pragma once

#include <stdexcept>
#include <string>

#include "optpipe_rt.h"

namespace optpipe::rt {

class RtError : public std::runtime_error {
 public:
  RtError(optpipe_rt_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  optpipe_rt_status status() const { return status_; }

 private:
  optpipe_rt_status status_;
};

}  // namespace optpipe::rt
