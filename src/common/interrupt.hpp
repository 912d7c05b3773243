// The program's request that waiting calls give up (accel_set_interrupted). One flag per process:
// a process has one accelerator, and every wait that may last (a collective, a data loader waiting
// for its workers, the Trainer between steps) looks at it at least every kPollSlice.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "common/error.hpp"

namespace accel::interrupt {

constexpr std::chrono::milliseconds kPollSlice{50};

inline std::atomic<bool>& flag() noexcept {
  static std::atomic<bool> requested{false};
  return requested;
}

inline void set(bool on) noexcept {
  flag().store(on, std::memory_order_release);
}
inline bool requested() noexcept {
  return flag().load(std::memory_order_acquire);
}

[[noreturn]] inline void fail_cancelled(const char* what, const char* detail = "") {
  fail(Errc::cancelled,
       std::string(what) + detail + ": interrupted by the program (accel_set_interrupted)");
}

// Errc::cancelled naming `what` (and `detail` after it), when the program asked waiting calls to
// give up. On every collective's path: one atomic load, the message built only on failure.
inline void check(const char* what, const char* detail = "") {
  if (requested()) fail_cancelled(what, detail);
}

}  // namespace accel::interrupt
