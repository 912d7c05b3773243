// The rank-aware logger (accel_log_message) and where its messages go (accel_set_log_sink): glue
// over the runtime's logging::Logger, which the library's own messages go through too.
#include "capi/handles.hpp"
#include "logging/logger.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::FamilyLock;
using accel::capi::guarded;
using accel::capi::require;
using accel::logging::Logger;

static_assert(ACCEL_LOG_ALL_PROCESSES == accel::logging::kAllProcesses,
              "the core marks every-process messages with accel.h's flag");

namespace {

// A program's log sink: called with the message, released when the last copy goes (replaced, or
// the accelerator freed).
struct ProgramSink {
  accel_log_sink_fn fn;
  void* user_data;
  accel_release_fn release;
  ~ProgramSink() {
    if (release) release(user_data);
  }
};

Logger& logger_of(const accel_accelerator* accelerator) {
  return checked(accelerator, "accelerator")->session->accelerator().logger();
}

void refuse_reentry(const Logger& logger, const char* what) {
  if (logger.in_sink())
    fail(Errc::state, std::string(what) + " called from inside the accelerator's log sink");
}

void check_level(int32_t level) {
  if (level < 0 || level > accel::logging::kMaxLevel)
    fail(Errc::invalid_argument, "log level " + std::to_string(level) + " is outside 0.." +
                                     std::to_string(accel::logging::kMaxLevel));
}

// Every rank in turn, a barrier after each (Accelerate's in_order); a failure of this rank's sink
// is reported after the last barrier, so that the others are not left waiting.
void write_in_order(accel_accelerator* accelerator, accel::runtime::Accelerator& runtime,
                    int32_t level, uint32_t flags, const char* message) {
  const auto& place = runtime.place();
  FamilyLock lock(accelerator->family);
  std::string failure;
  Errc code = Errc::callback;
  for (int32_t turn = 0; turn < place.world_size; ++turn) {
    if (turn == place.rank) {
      try {
        runtime.logger().write(level, flags, message);
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

accel_accelerator::~accel_accelerator() {
  // The program's sink is released now, and never called after this (accel.h).
  if (session) Logger::Sink old = session->accelerator().logger().replace_sink({});
}

extern "C" {

ACCEL_API accel_status accel_set_log_sink(accel_accelerator* accelerator, accel_log_sink_fn sink,
                                          void* user_data, accel_release_fn release) {
  return guarded([&] {
    Logger& logger = logger_of(accelerator);
    refuse_reentry(logger, "accel_set_log_sink");
    Logger::Sink wrapped;
    if (sink) {
      // Made in place: a copy would release the program's data when the temporary goes.
      std::shared_ptr<ProgramSink> owned(new ProgramSink{sink, user_data, release});
      wrapped = [owned](int32_t level, int32_t rank, uint32_t flags, const std::string& message) {
        const int32_t rc = owned->fn(level, rank, flags, message.c_str(), owned->user_data);
        if (rc != 0) fail(Errc::callback, "the log sink returned " + std::to_string(rc));
      };
    }
    // The old sink's release runs as `old` goes, outside the logger's lock: it may call into the
    // library.
    Logger::Sink old = logger.replace_sink(std::move(wrapped));
  });
}

ACCEL_API accel_status accel_get_log_level(const accel_accelerator* accelerator,
                                           accel_log_level* out) {
  return guarded([&] {
    const Logger& logger = logger_of(accelerator);
    require(out, "out");
    *out = logger.level();
  });
}

ACCEL_API accel_status accel_set_log_level(accel_accelerator* accelerator, accel_log_level level) {
  return guarded([&] {
    logger_of(accelerator).set_level(level);  // checks the range
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
    auto& runtime = session->accelerator();
    refuse_reentry(runtime.logger(), "accel_log_message");
    if (!runtime.logger().enabled(level)) return;
    const auto& place = runtime.place();
    if (!(flags & ACCEL_LOG_ALL_PROCESSES)) {
      if (place.rank == 0) runtime.logger().write(level, flags, message);
    } else if ((flags & ACCEL_LOG_IN_ORDER) && place.world_size > 1) {
      write_in_order(accelerator, runtime, level, flags, message);
    } else {
      runtime.logger().write(level, flags, message);
    }
  });
}

}  // extern "C"
