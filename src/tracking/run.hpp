// The trackers of an accelerator and the state of its run (Accelerate's init_trackers, log,
// end_training): the program's own trackers, kept across runs, and the file trackers log_with
// names, made for each run. Only the main process writes; the others keep the state alone, so
// that every process accepts and refuses the same calls. Pure.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tracking/tracker.hpp"

namespace accel::tracking {

class Run {
 public:
  // `warn`: where the file trackers' warnings go (may be empty).
  explicit Run(bool writes, Warn warn = {}) : writes_(writes), warn_(std::move(warn)) {}
  // Ends a started run; failures are dropped (nobody is left to hear them).
  ~Run();
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  // Adds a tracker of the program's own. Throws accel::Error: state while a run is started;
  // invalid_argument for an empty name, one of log_with's or one already added.
  void add(std::unique_ptr<Tracker> tracker);
  bool started() const { return started_; }

  // Starts `log_with`'s file trackers under logging_dir/project and every added tracker, all or
  // none. Throws accel::Error: state when started; invalid_argument for a project name that is
  // not one path component; config for an unknown tracker or log_with without a logging_dir; the
  // failing tracker's error, after finishing those already started.
  void start(const std::string& log_with, const std::string& logging_dir,
             const std::string& project, const Values& config);
  // Every tracker gets the values; then the first failure is thrown. Throws accel::Error(state)
  // when no run is started, invalid_argument for a step below -1.
  void log(const Values& values, int64_t step);
  // Finishes every tracker, then throws the first failure. Nothing started: nothing done.
  void finish();
  // Every tracker drops (or marks dropped) what was written after `step` (Tracker::resume_at).
  void resume_at(int64_t step);

 private:
  // Throws accel::Error(state) when called from inside a tracker's own call (a custom tracker's
  // callback calling back in), which would otherwise change the list being walked.
  class Busy;
  bool writes_;
  Warn warn_;
  bool busy_ = false;
  bool started_ = false;
  std::vector<std::unique_ptr<Tracker>> custom_;
  std::vector<std::unique_ptr<Tracker>> files_;
  // The trackers of the started run, in start order: files_ then custom_.
  std::vector<Tracker*> active_;
};

}  // namespace accel::tracking
