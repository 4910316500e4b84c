// SIGINT (Ctrl-C) and SIGTERM during a compile (docs/cli.md, Interrupting). The first asks the
// work to stop where it is, so that the best schedule found so far is written and summarised;
// a second ends the process at once.
#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <thread>

namespace optpipe {

// While it lives, SIGINT and SIGTERM are blocked in every thread and taken by a watcher thread,
// so CBC's and Clp's own SIGINT handlers (installed while they solve, and which only stop that
// solve) never see them. Construct it before any other thread starts: threads inherit the mask.
class InterruptWatch {
 public:
  // `on_first` runs on the watcher thread when the first signal arrives; a second signal then
  // exits with 128 + its number.
  explicit InterruptWatch(std::function<void(int signal)> on_first);
  ~InterruptWatch();
  InterruptWatch(const InterruptWatch&) = delete;
  InterruptWatch& operator=(const InterruptWatch&) = delete;

  // The first signal's number; 0 while none has arrived.
  int signal() const { return signal_; }
  // The exit code of a run that ended early for that signal (the shell's 128 + number), or
  // `otherwise` where none arrived.
  int exit_code(int otherwise) const { return signal_ ? 128 + signal_ : otherwise; }

 private:
  void watch(const std::stop_token& stop);
  // Takes a pending signal within `timeout`; 0 when none came.
  int take(const timespec& timeout) const;

  std::function<void(int)> on_first_;
  sigset_t signals_;
  sigset_t previous_mask_;
  std::atomic<int> signal_ = 0;
  std::jthread watcher_;
};

}  // namespace optpipe
