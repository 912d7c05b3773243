// The library's logger (accel.h, "Logging"): a level, where messages go (a program's sink, or
// standard error in stderr_line's format) and this process's place in the job. Every message of
// the library goes through one: its accelerator's, or process_logger() where none is in scope.
// Thread-safe: the store's thread logs beside the program's. Pure: no LibTorch.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "logging/levels.hpp"

namespace accel::logging {

// accel.h's ACCEL_LOG_ALL_PROCESSES: every process writes, its rank in the line.
constexpr uint32_t kAllProcesses = 1;
// accel.h's ACCEL_LOG_IN_ORDER: with kAllProcesses, every rank in turn (a collective).
constexpr uint32_t kInOrder = 2;

class Logger {
 public:
  // Gets one message; throws accel::Error (callback) when the program's sink failed.
  using Sink =
      std::function<void(int32_t level, int32_t rank, uint32_t flags, const std::string& message)>;

  explicit Logger(int32_t level = kInfo) : level_(level) {}
  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  int32_t level() const { return level_.load(); }
  // Throws accel::Error(invalid_argument) outside 0..kMaxLevel.
  void set_level(int32_t level);
  bool enabled(int32_t level) const { return level >= level_.load(); }
  void set_place(int32_t rank, int32_t world_size);
  int32_t rank() const { return rank_.load(); }
  int32_t world_size() const { return world_size_.load(); }

  // Replaces the sink (empty: standard error) and hands the old one back, so that its owner
  // releases it outside the logger's lock (a release may call into the library).
  Sink replace_sink(Sink sink);
  // One message of this process, whatever the level (the caller filtered): to the sink, or to
  // standard error in one write (lines of processes sharing it do not interleave mid-line).
  // Throws accel::Error: state when called from inside this logger's sink on this thread; what
  // the sink throws.
  void write(int32_t level, uint32_t flags, const std::string& message);
  // A message of the library's own: dropped below the level; never throws (a sink that fails, or
  // a call from inside the sink, gets the line on standard error with the reason).
  void say(int32_t level, const std::string& message, uint32_t flags = 0) noexcept;
  // Whether this thread is running this logger's sink now.
  bool in_sink() const;

 private:
  std::atomic<int32_t> level_;
  std::atomic<int32_t> rank_{0};
  std::atomic<int32_t> world_size_{1};
  std::mutex mutex_;  // the sink: called and replaced under it
  Sink sink_;
};

// The logger of messages no accelerator is in scope for (a dataset's cache): standard error, at
// the level ACCEL_LOG_LEVEL or ACCELERATE_LOG_LEVEL names when first used (info otherwise).
Logger& process_logger();

}  // namespace accel::logging
