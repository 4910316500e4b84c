// CPU backend: "device" memory is host memory, each copy channel is a thread running memcpy in
// FIFO order, the compute stream is the calling thread. Lets every engine and runner behaviour be
// tested without a GPU; an emulated bandwidth makes copies take the time the schedule predicts.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend.h"
#include "rt_error.h"

namespace optpipe::rt {

namespace {

using Clock = std::chrono::steady_clock;

class CpuTransfer : public Transfer {
 public:
  bool done() override {
    std::lock_guard lock(mutex_);
    return done_;
  }
  void synchronize() override {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return done_; });
  }
  double seconds() override {
    synchronize();
    return std::chrono::duration<double>(end_ - start_).count();
  }
  void finish(Clock::time_point start, Clock::time_point end) {
    std::lock_guard lock(mutex_);
    start_ = start;
    end_ = end;
    done_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  Clock::time_point start_, end_;
};

// One serial copy queue served by its own thread.
class CopyChannel {
 public:
  CopyChannel() : thread_([this] { serve(); }) {}
  ~CopyChannel() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void push(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_all();
  }

 private:
  void serve() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stopping, and everything queued has run
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options)
      : emulated_bytes_per_second_(options.cpu_emulated_bytes_per_second) {
    channels_.push_back(std::make_unique<CopyChannel>());
    if (options.channel_mode == 1) channels_.push_back(std::make_unique<CopyChannel>());
  }
  ~CpuBackend() override { synchronize_all(); }

  optpipe_rt_backend kind() const override { return OPTPIPE_RT_BACKEND_CPU; }

  void* allocate_pinned(size_t bytes) override {
    void* ptr = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
    if (ptr == nullptr) {
      throw RtError(OPTPIPE_RT_E_HOST_POOL,
                    "cannot allocate a host pool of " + std::to_string(bytes) + " bytes");
    }
    return ptr;
  }
  void free_pinned(void* ptr) override { std::free(ptr); }

  std::shared_ptr<Transfer> copy(Direction direction, void* dst, const void* src, size_t bytes,
                                 const std::shared_ptr<Transfer>& after) override {
    auto transfer = std::make_shared<CpuTransfer>();
    CopyChannel& channel =
        *channels_[direction == Direction::kHostToDevice && channels_.size() > 1 ? 1 : 0];
    const double bw = emulated_bytes_per_second_;
    channel.push([transfer, after, dst, src, bytes, bw] {
      if (after) after->synchronize();
      const auto start = Clock::now();
      std::memcpy(dst, src, bytes);
      if (bw > 0) {
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(bytes / bw)));
      }
      transfer->finish(start, Clock::now());
    });
    std::lock_guard lock(issued_mutex_);
    issued_.push_back(transfer);
    return transfer;
  }

  void compute_wait(Transfer& transfer) override { transfer.synchronize(); }

  size_t mark() override {
    marks_.push_back(Clock::now());
    return marks_.size() - 1;
  }
  double seconds_between(size_t first, size_t second) override {
    return std::chrono::duration<double>(marks_.at(second) - marks_.at(first)).count();
  }
  void clear_marks() override { marks_.clear(); }

  void synchronize_all() override {
    std::vector<std::shared_ptr<Transfer>> issued;
    {
      std::lock_guard lock(issued_mutex_);
      issued.swap(issued_);
    }
    for (auto& t : issued) t->synchronize();
  }

 private:
  double emulated_bytes_per_second_;
  std::vector<std::unique_ptr<CopyChannel>> channels_;
  std::vector<Clock::time_point> marks_;
  std::mutex issued_mutex_;
  std::vector<std::shared_ptr<Transfer>> issued_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace optpipe::rt
