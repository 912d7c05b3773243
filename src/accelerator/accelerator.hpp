// Accelerate's Accelerator: the one object accel_init makes. It owns the process's runtime (place,
// communicator, logger), the training session (prepared objects, accumulation, the step), the
// trigger and the tracker run; the C handle is a tag, one of these and its lock family. Unless a
// method says otherwise, calls are made under that family's lock (accel.h, "Threads").
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "config/config.hpp"
#include "logging/logger.hpp"
#include "prepare/session.hpp"
#include "profile/profiler.hpp"
#include "runtime/accelerator.hpp"
#include "tracking/run.hpp"
#include "tracking/tracker.hpp"

namespace accel {

class Accelerator {
 public:
  // Resolves `config` against `env` and joins the job (runtime::Accelerator's constructor).
  Accelerator(const config::Config& config, const config::EnvMap& env);
  // Ends a started tracker run and releases the program's log sink now, even while a call of a
  // prepared object still holds the session (accel.h: the sink is never called after the free).
  ~Accelerator();
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  runtime::Accelerator& runtime() { return session_->accelerator(); }
  const runtime::Accelerator& runtime() const { return session_->accelerator(); }
  prepare::Session& session() { return *session_; }
  const prepare::Session& session() const { return *session_; }
  // Prepared objects hold the session weakly: a call of theirs that is running keeps it alive to
  // its end; once the accelerator is freed, later calls report it.
  const std::shared_ptr<prepare::Session>& shared_session() const { return session_; }
  logging::Logger& logger() const { return session_->accelerator().logger(); }

  // Accelerate's set_trigger: from any thread, without the family lock.
  void set_trigger() noexcept { trigger_.store(true); }
  // Accelerate's check_trigger: a collective; true on every rank when any rank set it since the
  // last check, and then lowered.
  bool check_trigger();

  // Accelerate's main_process_first (local: local_main_process_first): the main process (each
  // machine's local main process) runs the block first, the others after; a barrier of all ranks.
  void main_process_first_begin(bool local = false);
  void main_process_first_end(bool local = false);
  // Accelerate's print: the local main process only, to standard output.
  void print(const std::string& message) const;
  // Accelerate's logger: rank 0 alone unless `flags` has logging::kAllProcesses; with
  // logging::kInOrder too, every rank in turn, a barrier after each (then under the family lock).
  // Throws accel::Error: state from inside the logger's own sink; invalid_argument for a level
  // outside 0..kMaxLevel or an unknown flag.
  void log_message(int32_t level, uint32_t flags, const std::string& message);

  // Accelerate's init_trackers / log / end_training, and a tracker of the program's own.
  void init_trackers(const std::string& project_name, const tracking::Values& config);
  void log(const tracking::Values& values, int64_t step) { run_->log(values, step); }
  void end_training() { run_->finish(); }
  bool trackers_started() const { return run_->started(); }
  // A run resumed at `step`: the trackers drop what an interrupted run wrote after it.
  void resume_trackers_at(int64_t step) { run_->resume_at(step); }
  void add_tracker(std::unique_ptr<tracking::Tracker> tracker) { run_->add(std::move(tracker)); }

  // save_state / load_state: into `dir`, or (null) the next or latest automatic checkpoint under
  // project_dir (ProjectConfiguration's automatic_checkpoint_naming).
  void save_state(const std::string* dir);
  void load_state(const std::string* dir);
  // Accelerate's save_model: the whole model (stage 3's parameters gathered), from the main
  // process, in shards of at most `max_shard_size`.
  void save_model(const model::Model& model, const std::string& dir,
                  const std::string& max_shard_size);

 private:
  void write_in_order(int32_t level, uint32_t flags, const std::string& message);

  std::shared_ptr<prepare::Session> session_;  // owns the runtime
  std::atomic<bool> trigger_{false};
  // Declared after `session_`: destroyed first, so that a run still started at the end is ended
  // while the runtime (and its logger) exists.
  std::unique_ptr<tracking::Run> run_;
};

// The end of Accelerate's profile() block: the profiler stops; with an output_trace_dir every rank
// writes profile_<rank>.json there (the last complete window) and all agree on success (a
// collective); the main process logs the window's summary table (info). A free function: a
// profiler outlives the accelerator object as prepared objects do, through the session.
void end_profile(runtime::Accelerator& runtime, profile::Profiler& profiler);

}  // namespace accel
