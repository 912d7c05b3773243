#include "net/sequencer.hpp"

#include "common/error.hpp"

namespace accel::net {

struct Sequencer::Ticket {
  std::function<void()> job;
  bool done = false;
  std::exception_ptr error;
};

Sequencer::~Sequencer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

// Runs the ticket's job with the lock released; the caller has set running_.
void Sequencer::execute(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Ticket>& ticket) {
  lock.unlock();
  std::exception_ptr error;
  try {
    ticket->job();
  } catch (...) {
    error = std::current_exception();
  }
  ticket->job = nullptr;  // releases what the job held (tensors) before the waiter goes on
  lock.lock();
  ticket->error = error;
  ticket->done = true;
  running_ = false;
  changed_.notify_all();
}

void Sequencer::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || (!running_ && !queue_.empty()); });
    if (stopping_) break;
    auto ticket = queue_.front();
    queue_.pop_front();
    running_ = true;
    execute(lock, ticket);
  }
  for (auto& t : queue_) {
    t->error = std::make_exception_ptr(
        Error(Errc::state, "the communicator was closed before this collective began"));
    t->done = true;
  }
  queue_.clear();
  changed_.notify_all();
}

std::shared_ptr<Sequencer::Ticket> Sequencer::start(std::function<void()> job) {
  auto ticket = std::make_shared<Ticket>();
  ticket->job = std::move(job);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(ticket);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  changed_.notify_all();
  return ticket;
}

void Sequencer::finish(const std::shared_ptr<Ticket>& ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!ticket->done) {
    // The waiter runs what is next itself (its own job or one ahead of it) rather than sleeping
    // while the thread wakes up to it.
    if (!running_ && !queue_.empty()) {
      auto next = queue_.front();
      queue_.pop_front();
      running_ = true;
      execute(lock, next);
      continue;
    }
    changed_.wait(lock);
  }
  if (ticket->error) std::rethrow_exception(ticket->error);
}

void Sequencer::run(const std::function<void()>& job) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!running_ && queue_.empty()) {
      running_ = true;
      auto ticket = std::make_shared<Ticket>();
      ticket->job = job;
      execute(lock, ticket);
      if (ticket->error) std::rethrow_exception(ticket->error);
      return;
    }
  }
  finish(start(job));
}

}  // namespace accel::net
