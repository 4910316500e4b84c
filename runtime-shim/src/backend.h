// What the offload engine needs from a device: pinned host memory, serial copy channels that run
// after the work already issued on the compute stream, completion tracking, and timestamps on the
// compute stream. CPU (cpu_backend.cc) and CUDA (cuda_backend.cu) implement it.
#pragma once

#include <cstddef>
#include <memory>

#include "optpipe_rt.h"

namespace optpipe::rt {

// One copy in flight or done.
class Transfer {
 public:
  virtual ~Transfer() = default;
  virtual bool done() = 0;         // non-blocking
  virtual void synchronize() = 0;  // host blocks until done
  virtual double seconds() = 0;    // copy duration, once done
};

enum class Direction { kDeviceToHost, kHostToDevice };

struct BackendOptions {
  int channel_mode = 1;  // 0 shared: one queue; 1 duplex: one per direction
  int cuda_device = 0;
  void* cuda_compute_stream = nullptr;
  double cpu_emulated_bytes_per_second = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual optpipe_rt_backend kind() const = 0;
  // Throws RtError(E_HOST_POOL) naming the size when it cannot.
  virtual void* allocate_pinned(size_t bytes) = 0;
  virtual void free_pinned(void* ptr) = 0;
  // Enqueues a copy on the direction's channel, ordered after the work issued so far on the
  // compute stream and after `after` (may be null). Copies on one channel run one at a time.
  virtual std::shared_ptr<Transfer> copy(Direction direction, void* dst, const void* src,
                                         size_t bytes, const std::shared_ptr<Transfer>& after) = 0;
  // The compute stream waits for `transfer` (CPU: the calling thread blocks).
  virtual void compute_wait(Transfer& transfer) = 0;
  // Timestamps on the compute stream: mark() after issuing work, seconds_between() once the
  // marks have passed (it may block until they have).
  virtual size_t mark() = 0;
  virtual double seconds_between(size_t first, size_t second) = 0;
  virtual void clear_marks() = 0;
  // Host blocks until every copy issued so far has ended.
  virtual void synchronize_all() = 0;
};

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options);
// Throws RtError(E_UNAVAILABLE) when the library was built without CUDA.
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);
bool cuda_backend_usable();  // built with CUDA and a device is present

}  // namespace optpipe::rt
