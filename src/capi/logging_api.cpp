// The rank-aware logger (accel_log_message) and where its messages go (accel_set_log_sink): glue
// over the accelerator's logging::Logger, which the library's own messages go through too.
#include "capi/handles.hpp"
#include "logging/logger.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::FamilyLock;
using accel::capi::guarded;
using accel::capi::require;
using accel::logging::Logger;

static_assert(ACCEL_LOG_ALL_PROCESSES == accel::logging::kAllProcesses &&
                  ACCEL_LOG_IN_ORDER == accel::logging::kInOrder,
              "the core knows accel.h's log flags by these values");

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
  return accel::capi::core_of(accelerator).logger();
}

void refuse_reentry(const Logger& logger, const char* what) {
  if (logger.in_sink())
    fail(Errc::state, std::string(what) + " called from inside the accelerator's log sink");
}

}  // namespace

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
  return accel::capi::query(accelerator, "accelerator", out,
                            [](const auto& h) { return h.core->logger().level(); });
}

ACCEL_API accel_status accel_set_log_level(accel_accelerator* accelerator, accel_log_level level) {
  return guarded([&] {
    logger_of(accelerator).set_level(level);  // checks the range
  });
}

ACCEL_API accel_status accel_log_message(accel_accelerator* accelerator, accel_log_level level,
                                         accel_log_flags flags, const char* message) {
  return guarded([&] {
    auto& core = accel::capi::core_of(accelerator);
    require(message, "message");
    if (flags & ACCEL_LOG_IN_ORDER) {
      FamilyLock lock(accelerator->family);  // its barriers are the family's collectives
      core.log_message(level, flags, message);
    } else {
      core.log_message(level, flags, message);
    }
  });
}

}  // extern "C"
