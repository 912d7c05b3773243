// torch.profiler's schedule and the actions between its states (torch/profiler/profiler.py), which
// Accelerate's ProfileKwargs(schedule_option=...) builds: which steps are skipped, warmed up or
// recorded, and when a recorded window is complete (on_trace_ready). Pure logic.
#pragma once

#include <cstdint>
#include <optional>

namespace accel::profile {

enum class Action { kNone, kWarmup, kRecord, kRecordAndSave };

struct Schedule {
  bool given = false;  // without one, every step records and the window closes at the end
  int64_t wait = 0, warmup = 0, active = 1, repeat = 0, skip_first = 0;

  // Throws accel::Error(invalid_argument) unless wait, warmup, repeat, skip_first >= 0 and
  // active > 0 (torch's assertion).
  void validate() const;
  Action at(int64_t step) const;
};

// What a change of action does, in torch's order: prepare (warm up) a window, start recording,
// stop it, hand the finished window over (on_trace_ready). `to` empty: the profiler stops.
struct Transition {
  bool prepare = false, start = false, stop = false, trace_ready = false;
  bool warn_incorrect = false;  // torch warns "Incorrect schedule" for these
  // The order: after a saved window, stop, trace_ready, prepare, start; otherwise prepare, start,
  // stop, trace_ready.
  bool stop_first = false;
};
Transition transition(Action from, std::optional<Action> to);

}  // namespace accel::profile
