#include "profile/profiler.hpp"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <exception>
#include <set>

#include "common/error.hpp"
#include "common/parse.hpp"
#include "compat/profiler_event.hpp"

namespace accel::profile {
namespace {

namespace tp = torch::profiler::impl;
namespace ta = torch::autograd::profiler;

bool flag_option(const std::string& key, const std::string& value) {
  if (value == "true" || value == "1") return true;
  if (value == "false" || value == "0") return false;
  fail(Errc::invalid_argument, "profiler option " + key + ": '" + value + "' is not true or false");
}

int64_t count_option(const std::string& key, const std::string& value) {
  long long v = 0;
  if (!parse_int(value, &v) || v < 0)
    fail(Errc::invalid_argument,
         "profiler option " + key + ": '" + value + "' is not a whole number >= 0");
  return v;
}

// All or nothing: a bad name leaves the activities as they were.
void set_activities(Options& options, const std::string& value) {
  Options o;
  o.cpu = o.cuda = false;
  size_t begin = 0;
  while (begin <= value.size()) {
    const size_t comma = std::min(value.find(',', begin), value.size());
    const std::string a = value.substr(begin, comma - begin);
    if (a == "cpu")
      o.cpu = true;
    else if (a == "cuda")
      o.cuda = true;
    else
      fail(Errc::invalid_argument,
           "profiler activities: '" + a + "' is not cpu or cuda (a comma-separated list)");
    begin = comma + 1;
  }
  options.cpu = o.cpu;
  options.cuda = o.cuda;
}

tp::ProfilerConfig config_of(const Options& o) {
  return tp::ProfilerConfig(tp::ProfilerState::KINETO, o.record_shapes, o.profile_memory,
                            o.with_stack, o.with_flops, o.with_modules);
}

std::set<tp::ActivityType> activities_of(const Options& o) {
  std::set<tp::ActivityType> a;
  if (o.cpu) a.insert(tp::ActivityType::CPU);
  if (o.cuda) a.insert(tp::ActivityType::CUDA);
  return a;
}

Event event_of(const ta::KinetoEvent& k) {
  Event e;
  e.name = k.name();
  e.start_us = compat::start_us(k);
  e.duration_us = compat::duration_us(k);
  e.thread = k.startThreadId();
  e.device = k.deviceType() == c10::DeviceType::CUDA ? "cuda" : "cpu";
  if (k.hasShapes())
    for (const auto& s : k.shapes()) e.shapes.push_back(s);
  if (k.hasTypes())
    for (const auto& t : k.dtypes()) e.dtypes.push_back(t);
  if (k.hasStack())
    for (const auto& f : k.stack()) e.stack.push_back(f);
  e.flops = k.flops();
  if (e.memory()) e.bytes = k.nBytes();
  return e;
}

}  // namespace

Profiler::~Profiler() {
  if (recording_ && std::this_thread::get_id() == thread_) {
    try {
      ta::disableProfiler();
    } catch (...) {  // nothing to report to from a destructor
    }
  }
}

void Profiler::set(const std::string& key, const std::string& value) {
  if (running_ || stopped_) fail(Errc::state, "profiler options are fixed once it has started");
  Schedule& s = options_.schedule;
  if (key == "activities") {
    set_activities(options_, value);
  } else if (key == "wait" || key == "warmup" || key == "active" || key == "repeat" ||
             key == "skip_first") {
    const int64_t v = count_option(key, value);
    s.given = true;
    (key == "wait"     ? s.wait
     : key == "warmup" ? s.warmup
     : key == "active" ? s.active
     : key == "repeat" ? s.repeat
                       : s.skip_first) = v;
  } else if (key == "record_shapes") {
    options_.record_shapes = flag_option(key, value);
  } else if (key == "profile_memory") {
    options_.profile_memory = flag_option(key, value);
  } else if (key == "with_stack") {
    options_.with_stack = flag_option(key, value);
  } else if (key == "with_flops") {
    options_.with_flops = flag_option(key, value);
  } else if (key == "with_modules") {
    options_.with_modules = flag_option(key, value);
  } else if (key == "output_trace_dir") {
    options_.output_trace_dir = value;
  } else {
    fail(Errc::invalid_argument,
         "unknown profiler option '" + key +
             "'; known: activities, wait, warmup, active, repeat, skip_first, record_shapes, "
             "profile_memory, with_stack, with_flops, with_modules, output_trace_dir");
  }
}

void Profiler::check_thread(const char* what) const {
  if (std::this_thread::get_id() != thread_)
    fail(Errc::state, std::string("profiler ") + what +
                          " from another thread than the one that started it (LibTorch's "
                          "profiler records the starting thread)");
}

void Profiler::start() {
  if (running_ || stopped_) fail(Errc::state, "the profiler was already started");
  options_.schedule.validate();
  if (!options_.cpu && !options_.cuda) fail(Errc::invalid_argument, "profiler: no activity");
  if (tp::profilerEnabled())
    fail(Errc::state, "LibTorch's profiler is already on in this thread (another profiler)");
  thread_ = std::this_thread::get_id();
  running_ = true;
  step_ = 0;
  action_ = options_.schedule.at(0);
  apply(Action::kNone, action_);
}

void Profiler::step() {
  if (!running_) fail(Errc::state, stopped_ ? "the profiler has stopped" : "start it first");
  check_thread("step");
  const Action before = action_;
  action_ = options_.schedule.at(++step_);
  apply(before, action_);
}

void Profiler::stop() {
  if (!running_) return;
  check_thread("stop");
  running_ = false;
  stopped_ = true;
  apply(action_, std::nullopt);
}

// torch.profiler's _transit_action.
void Profiler::apply(Action from, std::optional<Action> to) {
  const Transition t = transition(from, to);
  std::vector<Event> window;
  auto stop = [&] {
    if (t.stop) window = collect();
  };
  // The program's function may fail; the next window still starts, and its error comes after.
  std::exception_ptr failed;
  auto ready = [&] {
    if (!t.trace_ready) return;
    events_ = std::move(window);
    ++windows_;
    try {
      if (ready_) ready_();
    } catch (...) {
      failed = std::current_exception();
    }
  };
  if (t.stop_first) {
    stop();
    ready();
    if (t.prepare) prepare();
    if (t.start) enable();
  } else {
    if (t.prepare) prepare();
    if (t.start) enable();
    stop();
    ready();
  }
  if (failed) std::rethrow_exception(failed);
}

// torch.profiler's prepare_trace: Kineto (LibTorch 2.x's wheels) must be prepared before a trace
// starts, or it crashes; Debian's 1.13 has no Kineto and only checks the configuration.
void Profiler::prepare() {
  if (prepared_) return;
  try {
    ta::prepareProfiler(config_of(options_), activities_of(options_));
  } catch (const c10::Error& e) {
    fail(Errc::torch,
         std::string("LibTorch's profiler could not be prepared: ") + e.what_without_backtrace());
  }
  prepared_ = true;
}

void Profiler::enable() {
  prepare();
  try {
    ta::enableProfiler(config_of(options_), activities_of(options_));
  } catch (const c10::Error& e) {
    fail(Errc::torch,
         std::string("LibTorch's profiler did not start: ") + e.what_without_backtrace());
  }
  recording_ = true;
}

std::vector<Event> Profiler::collect() {
  recording_ = prepared_ = false;
  std::unique_ptr<ta::ProfilerResult> result;
  try {
    result = ta::disableProfiler();
  } catch (const c10::Error& e) {
    fail(Errc::torch,
         std::string("LibTorch's profiler did not stop: ") + e.what_without_backtrace());
  }
  std::vector<Event> out;
  if (result)
    for (const auto& k : result->events()) out.push_back(event_of(k));
  return out;
}

}  // namespace accel::profile
