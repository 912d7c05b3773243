// Runs a communicator's collectives one at a time, in the order they were started: on its own
// thread, so that a started collective proceeds while the caller computes, or on the caller's
// thread when the caller waits for a collective nothing is ahead of (no hand-off for a
// synchronous call). Pure logic.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace accel::net {

class Sequencer {
 public:
  struct Ticket;
  Sequencer() = default;
  Sequencer(const Sequencer&) = delete;
  Sequencer& operator=(const Sequencer&) = delete;
  // Ends the thread once the collective it runs (if any) has ended; collectives not begun fail
  // with Errc::state. Whoever owns the wire makes a running one end first (Ring::close).
  ~Sequencer();

  // Queues `job` behind the collectives started before it and returns at once.
  std::shared_ptr<Ticket> start(std::function<void()> job);
  // Waits for the job to end and rethrows what it threw; jobs not begun up to it run here, in
  // order. Every ticket is finished at most once.
  void finish(const std::shared_ptr<Ticket>& ticket);
  // start then finish, without waking the thread when nothing is queued.
  void run(const std::function<void()>& job);

 private:
  void loop();
  void execute(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Ticket>& ticket);

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Ticket>> queue_;
  bool running_ = false;  // a job is executing (on the thread or a caller)
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace accel::net
