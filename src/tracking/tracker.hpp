// Experiment trackers, as Accelerate's (tracking.py): started once per run with the run's
// hyperparameters (init_trackers), given named values at a step (log), closed by end_training.
// The trackers here write files only (TensorBoard event files, JSON lines, CSV); the C ABI adds
// trackers made of a program's callbacks. Pure: no LibTorch. Main-process-only is the caller's
// rule.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace accel::tracking {

// One named value: a number (any double, NaN and infinities included) or a text.
struct Value {
  std::string key;
  bool is_text = false;
  double number = 0;
  std::string text;
};
using Values = std::vector<Value>;

// Step of a value logged without one (Accelerate's step=None).
constexpr int64_t kNoStep = -1;

class Tracker {
 public:
  virtual ~Tracker() = default;
  // A built-in tracker's log_with name (the table in trackers.cpp), or a custom tracker's own.
  virtual const std::string& name() const = 0;
  // Creates what the run `project` writes and records `config`. Throws accel::Error (io: naming
  // the path).
  virtual void start(const std::string& project, const Values& config) = 0;
  // Writes `values` at `step` (kNoStep: none), `wall_time` seconds since the epoch; on return what
  // was written is in the kernel's hands (a killed process loses none of it).
  virtual void log(const Values& values, int64_t step, double wall_time) = 0;
  // Flushes and closes; further calls are no-ops.
  virtual void finish() = 0;
  // A run resumed from a checkpoint at `step`: what an earlier run wrote after it (before it was
  // killed) is dropped or, where a format cannot drop, marked so readers drop it, so that the
  // records are the uninterrupted run's. Default: nothing (a custom tracker's own business).
  virtual void resume_at(int64_t /*step*/) {}
};

// Seconds since the epoch, with fractions (Event.wall_time, the files' wall_time).
double wall_clock_now();

// Where a tracker's warnings go (the accelerator's logger): a file it found torn and repaired.
using Warn = std::function<void(const std::string& message)>;

// The file trackers of a run, by Accelerate's `log_with` names (the built-in trackers' names, kept
// in one table in trackers.cpp, "all" = every one of them; a comma-separated list), writing under
// `dir` (logging_dir/project_name), warning through `warn` (may be empty: no warnings). Throws
// accel::Error(config) naming an unknown tracker, with the known ones.
std::vector<std::unique_ptr<Tracker>> make_file_trackers(const std::string& log_with,
                                                         const std::string& dir, Warn warn);

// The names `log_with` lists (each checked as above; "all" expanded), in order, without repeats.
std::vector<std::string> parse_log_with(const std::string& log_with);

// Whether `name` is one of log_with's names (a built-in tracker's, or "all"): a custom tracker
// cannot take it.
bool is_log_with_name(const std::string& name);

}  // namespace accel::tracking
