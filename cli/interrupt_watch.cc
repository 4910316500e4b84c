#include "cli/interrupt_watch.h"

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <system_error>
#include <utility>

namespace optpipe {

namespace {

// How long the watcher waits for a signal before it looks whether it should end: the delay a
// finished compile has before it exits.
constexpr timespec kPoll{0, 50'000'000};
constexpr timespec kNoWait{0, 0};

}  // namespace

InterruptWatch::InterruptWatch(std::function<void(int)> on_first) : on_first_(std::move(on_first)) {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGTERM);
  if (const int error = pthread_sigmask(SIG_BLOCK, &signals_, &previous_mask_)) {
    throw std::system_error(error, std::generic_category(), "pthread_sigmask");
  }
  watcher_ = std::jthread([this](const std::stop_token& stop) { watch(stop); });
}

InterruptWatch::~InterruptWatch() {
  watcher_.request_stop();
  watcher_.join();
  // One that came after the watcher's last look: taken here, since unblocking it would kill the
  // process on its way out.
  if (const int late = take(kNoWait); late && !signal_) signal_ = late;
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

void InterruptWatch::watch(const std::stop_token& stop) {
  while (!stop.stop_requested()) {
    const int received = take(kPoll);
    if (!received) continue;
    if (signal_) {  // the second: at once, saying what is left behind
      static constexpr char kMessage[] =
          "interrupted again: quitting at once; an output holds the last schedule reported as "
          "written above, if any, and nothing newer\n";
      [[maybe_unused]] const ssize_t written = ::write(2, kMessage, sizeof kMessage - 1);
      std::_Exit(128 + received);
    }
    signal_ = received;
    if (on_first_) on_first_(received);
  }
}

int InterruptWatch::take(const timespec& timeout) const {
  while (true) {
    const int received = sigtimedwait(&signals_, nullptr, &timeout);
    if (received > 0) return received;
    if (errno != EINTR) return 0;  // EAGAIN: none within the timeout
  }
}

}  // namespace optpipe
