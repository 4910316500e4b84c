// CUDA backend: pinned host memory from cudaHostAlloc, copies with cudaMemcpyAsync on one copy
// stream per channel (shared: one; duplex: D2H and H2D), ordered after the trainer's compute
// stream with events; B's stream waits on the reload's event. Every CUDA call is checked.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "backend.h"
#include "rt_error.h"

namespace optpipe::rt {

namespace {

void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) {
    throw RtError(OPTPIPE_RT_E_BACKEND, std::string(call) + " failed: " + cudaGetErrorName(status) +
                                            ": " + cudaGetErrorString(status) + " (" + file + ":" +
                                            std::to_string(line) + ")");
  }
}
#define OPTPIPE_CUDA_CHECK(call) check((call), #call, __FILE__, __LINE__)

cudaEvent_t new_event(bool timing) {
  cudaEvent_t event;
  OPTPIPE_CUDA_CHECK(
      cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming));
  return event;
}

class CudaTransfer : public Transfer {
 public:
  CudaTransfer() : start_(new_event(true)), end_(new_event(true)) {}
  ~CudaTransfer() override {
    cudaEventDestroy(start_);  // released by CUDA once the event has completed
    cudaEventDestroy(end_);
  }
  bool done() override {
    const cudaError_t status = cudaEventQuery(end_);
    if (status == cudaErrorNotReady) return false;
    OPTPIPE_CUDA_CHECK(status);
    return true;
  }
  void synchronize() override { OPTPIPE_CUDA_CHECK(cudaEventSynchronize(end_)); }
  double seconds() override {
    synchronize();
    float ms = 0;
    OPTPIPE_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, end_));
    return ms / 1e3;
  }
  cudaEvent_t start_event() const { return start_; }
  cudaEvent_t end_event() const { return end_; }

 private:
  cudaEvent_t start_, end_;
};

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& options)
      : compute_(static_cast<cudaStream_t>(options.cuda_compute_stream)) {
    OPTPIPE_CUDA_CHECK(cudaSetDevice(options.cuda_device));
    const int channels = options.channel_mode == 1 ? 2 : 1;
    for (int i = 0; i < channels; ++i) {
      cudaStream_t stream;
      OPTPIPE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      streams_.push_back(stream);
    }
    compute_ready_ = new_event(false);
  }
  ~CudaBackend() override {
    for (cudaStream_t s : streams_) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
    clear_marks();
    cudaEventDestroy(compute_ready_);
  }

  optpipe_rt_backend kind() const override { return OPTPIPE_RT_BACKEND_CUDA; }

  void* allocate_pinned(size_t bytes) override {
    void* ptr = nullptr;
    const cudaError_t status = cudaHostAlloc(&ptr, bytes > 0 ? bytes : 1, cudaHostAllocDefault);
    if (status != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error so later calls work
      throw RtError(OPTPIPE_RT_E_HOST_POOL,
                    "cudaHostAlloc of a " + std::to_string(bytes) +
                        "-byte pinned host pool failed: " + cudaGetErrorString(status) +
                        " (lower the schedule's offloading or raise the pinned-memory limit)");
    }
    return ptr;
  }
  void free_pinned(void* ptr) override { OPTPIPE_CUDA_CHECK(cudaFreeHost(ptr)); }

  std::shared_ptr<Transfer> copy(Direction direction, void* dst, const void* src, size_t bytes,
                                 const std::shared_ptr<Transfer>& after) override {
    cudaStream_t stream =
        streams_[direction == Direction::kHostToDevice && streams_.size() > 1 ? 1 : 0];
    auto transfer = std::make_shared<CudaTransfer>();
    OPTPIPE_CUDA_CHECK(cudaEventRecord(compute_ready_, compute_));
    OPTPIPE_CUDA_CHECK(cudaStreamWaitEvent(stream, compute_ready_, 0));
    if (after) {
      auto* previous = static_cast<CudaTransfer*>(after.get());
      OPTPIPE_CUDA_CHECK(cudaStreamWaitEvent(stream, previous->end_event(), 0));
    }
    OPTPIPE_CUDA_CHECK(cudaEventRecord(transfer->start_event(), stream));
    OPTPIPE_CUDA_CHECK(cudaMemcpyAsync(
        dst, src, bytes,
        direction == Direction::kDeviceToHost ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
        stream));
    OPTPIPE_CUDA_CHECK(cudaEventRecord(transfer->end_event(), stream));
    return transfer;
  }

  void compute_wait(Transfer& transfer) override {
    OPTPIPE_CUDA_CHECK(
        cudaStreamWaitEvent(compute_, static_cast<CudaTransfer&>(transfer).end_event(), 0));
  }

  size_t mark() override {
    cudaEvent_t event = new_event(true);
    marks_.push_back(event);
    OPTPIPE_CUDA_CHECK(cudaEventRecord(event, compute_));
    return marks_.size() - 1;
  }
  double seconds_between(size_t first, size_t second) override {
    OPTPIPE_CUDA_CHECK(cudaEventSynchronize(marks_.at(second)));
    float ms = 0;
    OPTPIPE_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_.at(first), marks_.at(second)));
    return ms / 1e3;
  }
  void clear_marks() override {
    for (cudaEvent_t e : marks_) cudaEventDestroy(e);
    marks_.clear();
  }

  void synchronize_all() override {
    for (cudaStream_t s : streams_) OPTPIPE_CUDA_CHECK(cudaStreamSynchronize(s));
  }

 private:
  cudaStream_t compute_;
  std::vector<cudaStream_t> streams_;
  cudaEvent_t compute_ready_;
  std::vector<cudaEvent_t> marks_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

bool cuda_backend_usable() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

}  // namespace optpipe::rt
