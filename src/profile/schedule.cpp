#include "profile/schedule.hpp"

#include <string>

#include "common/error.hpp"

namespace accel::profile {

void Schedule::validate() const {
  if (!given) return;
  if (wait < 0 || warmup < 0 || active <= 0 || repeat < 0 || skip_first < 0)
    fail(Errc::invalid_argument,
         "profiler schedule: wait, warmup, repeat and skip_first must be >= 0 and active > 0 "
         "(got wait " +
             std::to_string(wait) + ", warmup " + std::to_string(warmup) + ", active " +
             std::to_string(active) + ", repeat " + std::to_string(repeat) + ", skip_first " +
             std::to_string(skip_first) + ")");
}

Action Schedule::at(int64_t step) const {
  if (!given) return Action::kRecord;
  if (step < skip_first) return Action::kNone;
  step -= skip_first;
  const int64_t cycle = wait + warmup + active;
  if (repeat > 0 && step / cycle >= repeat) return Action::kNone;
  const int64_t mod = step % cycle;
  if (mod < wait) return Action::kNone;
  if (mod < wait + warmup) return Action::kWarmup;
  return mod < cycle - 1 ? Action::kRecord : Action::kRecordAndSave;
}

Transition transition(Action from, std::optional<Action> to) {
  Transition t;
  const bool saving = from == Action::kRecordAndSave;
  if (!to) {  // the profiler stops
    t.start = from == Action::kWarmup;
    t.stop = from != Action::kNone;
    t.trace_ready = from == Action::kRecord || saving;
    return t;
  }
  const Action a = *to;
  switch (from) {
    case Action::kNone:
      t.prepare = a != Action::kNone;
      t.start = a == Action::kRecord || a == Action::kRecordAndSave;
      break;
    case Action::kWarmup:
      t.start = a != Action::kWarmup;
      t.stop = a == Action::kNone;
      t.warn_incorrect = a == Action::kNone;
      break;
    case Action::kRecord:
      t.stop = a == Action::kNone || a == Action::kWarmup;
      t.warn_incorrect = t.stop;
      break;
    case Action::kRecordAndSave:
      t.stop = t.trace_ready = t.stop_first = true;
      t.prepare = a != Action::kNone;
      t.start = a == Action::kRecord || a == Action::kRecordAndSave;
      break;
  }
  return t;
}

}  // namespace accel::profile
