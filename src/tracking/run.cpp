#include "tracking/run.hpp"

#include <exception>

#include "common/error.hpp"

namespace accel::tracking {
namespace {

// Runs `f` for every tracker, then rethrows the first exception.
template <class F>
void for_each_then_throw(const std::vector<Tracker*>& trackers, F&& f) {
  std::exception_ptr first;
  for (Tracker* t : trackers) {
    try {
      f(*t);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace

class Run::Busy {
 public:
  explicit Busy(Run& run) : run_(run) {
    if (run_.busy_)
      fail(Errc::state,
           "a tracker's callback called back into the trackers (init_trackers, log, "
           "end_training or add_tracker): not allowed");
    run_.busy_ = true;
  }
  ~Busy() { run_.busy_ = false; }

 private:
  Run& run_;
};

Run::~Run() {
  try {
    finish();
  } catch (...) {
  }
}

void Run::add(std::unique_ptr<Tracker> tracker) {
  Busy busy(*this);
  if (started_)
    fail(Errc::state,
         "a tracker cannot be added while a run is started (accel_end_training first)");
  const std::string& name = tracker->name();
  if (name.empty()) fail(Errc::invalid_argument, "a tracker needs a name");
  if (is_log_with_name(name))
    fail(Errc::invalid_argument,
         "'" + name + "' is a tracker of log_with; name the program's own tracker otherwise");
  for (const auto& have : custom_)
    if (have->name() == name)
      fail(Errc::invalid_argument, "a tracker named '" + name + "' was added already");
  custom_.push_back(std::move(tracker));
}

void Run::start(const std::string& log_with, const std::string& logging_dir,
                const std::string& project, const Values& config) {
  Busy busy(*this);
  if (started_)
    fail(Errc::state, "the trackers are started already (accel_end_training ends the run)");
  if (project.empty() || project == "." || project == ".." ||
      project.find('/') != std::string::npos)
    fail(Errc::invalid_argument, "project name '" + project +
                                     "': one path component is needed (not empty, no '/', "
                                     "not . or ..)");
  const auto names = parse_log_with(log_with);  // every process checks the names
  if (!names.empty() && logging_dir.empty())
    fail(Errc::config, "log_with " + log_with +
                           " writes files: set logging_dir or project_dir (as Accelerate, which "
                           "requires a logging_dir for them)");
  if (writes_) {
    files_ = make_file_trackers(log_with, logging_dir + "/" + project, warn_);
    std::vector<Tracker*> order;
    for (auto& t : files_) order.push_back(t.get());
    for (auto& t : custom_) order.push_back(t.get());
    std::vector<Tracker*> done;
    try {
      for (Tracker* t : order) {
        t->start(project, config);
        done.push_back(t);
      }
    } catch (...) {
      try {
        for_each_then_throw(done, [](Tracker& t) { t.finish(); });
      } catch (...) {
      }
      files_.clear();
      throw;
    }
    active_ = order;
  }
  started_ = true;
}

void Run::log(const Values& values, int64_t step) {
  Busy busy(*this);
  if (!started_) fail(Errc::state, "no run is started: call accel_init_trackers before accel_log");
  if (step < kNoStep)
    fail(Errc::invalid_argument, "step " + std::to_string(step) + " (>= 0, or -1 for none)");
  const double now = wall_clock_now();
  for_each_then_throw(active_, [&](Tracker& t) { t.log(values, step, now); });
}

void Run::resume_at(int64_t step) {
  Busy busy(*this);
  if (!started_) return;
  for_each_then_throw(active_, [&](Tracker& t) { t.resume_at(step); });
}

void Run::finish() {
  Busy busy(*this);
  if (!started_) return;
  started_ = false;
  std::vector<Tracker*> active;
  active.swap(active_);
  try {
    for_each_then_throw(active, [](Tracker& t) { t.finish(); });
  } catch (...) {
    files_.clear();
    throw;
  }
  files_.clear();
}

}  // namespace accel::tracking
