// Accelerate's accelerator.profile(ProfileKwargs(...)) on LibTorch's profiler: the options by key,
// torch.profiler's schedule (profile/schedule.hpp) driven by step(), and the last recorded window's
// events for the Chrome trace and the summary table (profile/trace.hpp). LibTorch records the ops
// of the thread that starts it (and the intra-op threads it hands work to): start, step and stop
// are called from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "profile/schedule.hpp"
#include "profile/trace.hpp"

namespace accel::profile {

struct Options {
  bool cpu = true, cuda = false;  // activities
  Schedule schedule;
  bool record_shapes = false, profile_memory = false, with_stack = false, with_flops = false,
       with_modules = false;
  std::string output_trace_dir;  // where stop() writes profile_<rank>.json ("" : nowhere)
};

class Profiler {
 public:
  // Called each time a recorded window is complete (Accelerate's on_trace_ready).
  using TraceReady = std::function<void()>;

  Profiler() = default;
  ~Profiler();  // stops LibTorch's profiler if this one still has it on (same thread only)
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // activities (cpu, cuda, or both comma-separated), wait, warmup, active, repeat, skip_first
  // (setting any of these five gives a schedule), record_shapes, profile_memory, with_stack,
  // with_flops, with_modules, output_trace_dir. Before start(); throws invalid_argument.
  void set(const std::string& key, const std::string& value);
  void on_trace_ready(TraceReady fn) { ready_ = std::move(fn); }
  const Options& options() const { return options_; }

  // Step 0's action. Throws state when started twice or when LibTorch's profiler is already on.
  void start();
  // The next step begins (torch.profiler's prof.step()).
  void step();
  // Closes the open window (on_trace_ready if it recorded). Idempotent.
  void stop();

  bool running() const { return running_; }
  int64_t step_number() const { return step_; }
  int64_t windows() const { return windows_; }
  // The events of the last complete window (empty before the first).
  const std::vector<Event>& events() const { return events_; }

 private:
  void apply(Action from, std::optional<Action> to);
  void check_thread(const char* what) const;
  void prepare();
  void enable();
  std::vector<Event> collect();  // stops LibTorch's profiler: the window's events

  Options options_;
  TraceReady ready_;
  bool running_ = false, stopped_ = false, recording_ = false, prepared_ = false;
  int64_t step_ = 0, windows_ = 0;
  Action action_ = Action::kNone;
  std::thread::id thread_;
  std::vector<Event> events_;
};

}  // namespace accel::profile
