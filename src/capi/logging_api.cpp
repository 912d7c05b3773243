// The rank-aware logger (accel_log_message) and where its messages go (accel_set_log_sink).
#include <cstdio>

#include "capi/handles.hpp"
#include "logging/levels.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::FamilyLock;
using accel::capi::guarded;
using accel::capi::LogSink;
using accel::capi::require;

namespace {

// The accelerator whose sink this thread is running, if any: a sink that logs or replaces the
// sink from inside would deadlock on log_mutex.
thread_local const accel_accelerator* t_in_sink = nullptr;

void refuse_reentry(const accel_accelerator* accelerator, const char* what) {
  if (t_in_sink == accelerator)
    fail(Errc::state, std::string(what) + " called from inside the accelerator's log sink");
}

void check_level(int32_t level) {
  if (level < 0 || level > accel::logging::kMaxLevel)
    fail(Errc::invalid_argument, "log level " + std::to_string(level) + " is outside 0.." +
                                     std::to_string(accel::logging::kMaxLevel));
}

// Writes one message to the sink, or to standard error in one call (lines of ranks sharing the
// stream do not interleave mid-line).
void emit(accel_accelerator* accelerator, int32_t level, int32_t rank, int32_t world_size,
          uint32_t flags, const char* message) {
  std::lock_guard<std::mutex> lock(accelerator->log_mutex);
  const LogSink* sink = accelerator->log_sink.get();
  if (!sink) {
    const std::string line = accel::logging::stderr_line(
        level, rank, world_size, (flags & ACCEL_LOG_ALL_PROCESSES) != 0, message);
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
    return;
  }
  t_in_sink = accelerator;
  const int32_t rc = sink->fn(level, rank, flags, message, sink->user_data);
  t_in_sink = nullptr;
  if (rc != 0) fail(Errc::callback, "the log sink returned " + std::to_string(rc));
}

// Every rank in turn, a barrier after each (Accelerate's in_order); a failure of this rank's sink
// is reported after the last barrier, so that the others are not left waiting.
void emit_in_order(accel_accelerator* accelerator, accel::runtime::Accelerator& runtime,
                   int32_t level, uint32_t flags, const char* message) {
  const auto& place = runtime.place();
  FamilyLock lock(accelerator->family);
  std::string failure;
  Errc code = Errc::callback;
  for (int32_t turn = 0; turn < place.world_size; ++turn) {
    if (turn == place.rank) {
      try {
        emit(accelerator, level, place.rank, place.world_size, flags, message);
      } catch (const accel::Error& e) {
        failure = e.what();
        code = e.code();
      }
    }
    runtime.wait_for_everyone();
  }
  if (!failure.empty()) fail(code, failure);
}

}  // namespace

void accel::capi::log_from_library(accel_accelerator* accelerator, int32_t level,
                                   const std::string& message) {
  if (level < accelerator->log_level.load()) return;
  const auto& place = accelerator->session->accelerator().place();
  try {
    emit(accelerator, level, place.rank, place.world_size, 0, message.c_str());
  } catch (const std::exception& e) {
    std::string line =
        accel::logging::stderr_line(level, place.rank, place.world_size, false, message);
    line.pop_back();  // its newline: the sink's failure goes on the same line
    std::fprintf(stderr, "%s (the log sink failed: %s)\n", line.c_str(), e.what());
  }
}

extern "C" {

ACCEL_API accel_status accel_set_log_sink(accel_accelerator* accelerator, accel_log_sink_fn sink,
                                          void* user_data, accel_release_fn release) {
  return guarded([&] {
    checked(accelerator, "accelerator");
    refuse_reentry(accelerator, "accel_set_log_sink");
    std::unique_ptr<LogSink> replaced;
    if (sink) replaced.reset(new LogSink{sink, user_data, release});
    {
      std::lock_guard<std::mutex> lock(accelerator->log_mutex);
      accelerator->log_sink.swap(replaced);
    }
    // The old sink's release runs here, outside the lock: it may call into the library.
  });
}

ACCEL_API accel_status accel_get_log_level(const accel_accelerator* accelerator,
                                           accel_log_level* out) {
  return guarded([&] {
    checked(accelerator, "accelerator");
    require(out, "out");
    *out = accelerator->log_level.load();
  });
}

ACCEL_API accel_status accel_set_log_level(accel_accelerator* accelerator, accel_log_level level) {
  return guarded([&] {
    checked(accelerator, "accelerator");
    check_level(level);
    accelerator->log_level = level;
  });
}

ACCEL_API accel_status accel_log_message(accel_accelerator* accelerator, accel_log_level level,
                                         accel_log_flags flags, const char* message) {
  return guarded([&] {
    auto session = checked(accelerator, "accelerator")->session;
    require(message, "message");
    check_level(level);
    if (flags & ~uint32_t{ACCEL_LOG_ALL_PROCESSES | ACCEL_LOG_IN_ORDER})
      fail(Errc::invalid_argument, "unknown log flags " + std::to_string(flags));
    refuse_reentry(accelerator, "accel_log_message");
    if (level < accelerator->log_level.load()) return;
    auto& runtime = session->accelerator();
    const auto& place = runtime.place();
    if (!(flags & ACCEL_LOG_ALL_PROCESSES)) {
      if (place.rank == 0) emit(accelerator, level, place.rank, place.world_size, flags, message);
    } else if ((flags & ACCEL_LOG_IN_ORDER) && place.world_size > 1) {
      emit_in_order(accelerator, runtime, level, flags, message);
    } else {
      emit(accelerator, level, place.rank, place.world_size, flags, message);
    }
  });
}

}  // extern "C"
