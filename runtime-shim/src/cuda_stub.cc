// Built when the CUDA backend is not (OPTPIPE_CUDA=OFF or no nvcc found).
#include "backend.h"
#include "rt_error.h"

namespace optpipe::rt {

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions&) {
  throw RtError(OPTPIPE_RT_E_UNAVAILABLE,
                "the CUDA backend is not built into this library (configure with OPTPIPE_CUDA=ON "
                "on a machine with nvcc)");
}

bool cuda_backend_usable() {
  return false;
}

}  // namespace optpipe::rt
