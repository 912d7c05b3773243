#include "logging/logger.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "common/error.hpp"

namespace accel::logging {
namespace {

// The logger whose sink this thread is running, if any: a sink that logs through its own logger
// would wait on the logger's lock for ever.
thread_local const Logger* t_in_sink = nullptr;

void to_stderr(const std::string& line) {
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

int32_t level_from_environment() {
  for (const char* name : {"ACCEL_LOG_LEVEL", "ACCELERATE_LOG_LEVEL"}) {
    const char* value = std::getenv(name);
    if (!value || !*value) continue;
    try {
      return level_from_name(value);
    } catch (const std::exception& e) {
      to_stderr(stderr_line(kWarning, 0, 1, false, std::string(name) + ": " + e.what()));
    }
  }
  return kInfo;
}

}  // namespace

void Logger::set_level(int32_t level) {
  if (level < 0 || level > kMaxLevel)
    fail(Errc::invalid_argument,
         "log level " + std::to_string(level) + " is outside 0.." + std::to_string(kMaxLevel));
  level_ = level;
}

void Logger::set_place(int32_t rank, int32_t world_size) {
  rank_ = rank;
  world_size_ = world_size;
}

Logger::Sink Logger::replace_sink(Sink sink) {
  std::lock_guard<std::mutex> lock(mutex_);
  sink_.swap(sink);
  return sink;
}

bool Logger::in_sink() const {
  return t_in_sink == this;
}

void Logger::write(int32_t level, uint32_t flags, const std::string& message) {
  if (in_sink()) fail(Errc::state, "a message was logged from inside the logger's own sink");
  std::lock_guard<std::mutex> lock(mutex_);
  if (!sink_) {
    to_stderr(stderr_line(level, rank_, world_size_, (flags & kAllProcesses) != 0, message));
    return;
  }
  // Restored as it was, not cleared: a sink may log through another accelerator's logger.
  struct InSink {
    const Logger* before;
    explicit InSink(const Logger* now) : before(t_in_sink) { t_in_sink = now; }
    ~InSink() { t_in_sink = before; }
  } in_sink(this);
  sink_(level, rank_, flags, message);
}

void Logger::say(int32_t level, const std::string& message, uint32_t flags) noexcept {
  if (!enabled(level)) return;
  try {
    write(level, flags, message);
  } catch (const std::exception& e) {
    try {
      std::string line =
          stderr_line(level, rank_, world_size_, (flags & kAllProcesses) != 0, message);
      line.pop_back();  // its newline: the reason goes on the same line
      to_stderr(line + " (not given to the log sink: " + e.what() + ")\n");
    } catch (...) {
    }
  } catch (...) {
  }
}

Logger& process_logger() {
  static Logger logger(level_from_environment());
  return logger;
}

}  // namespace accel::logging
