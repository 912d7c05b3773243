#include "accelerator/accelerator.hpp"

#include <ATen/ATen.h>

#include <cstdio>

#include "checkpoint/model_io.hpp"
#include "checkpoint/state.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "logging/levels.hpp"
#include "ops/collectives.hpp"
#include "ops/main_process.hpp"

namespace accel {

Accelerator::Accelerator(const config::Config& config, const config::EnvMap& env)
    : session_(
          std::make_shared<prepare::Session>(std::make_unique<runtime::Accelerator>(config, env))) {
  auto& runtime = session_->accelerator();
  run_ = std::make_unique<tracking::Run>(
      runtime.is_main_process(),
      [&logger = runtime.logger()](const std::string& message) {  // the runtime outlives the run
        logger.say(logging::kWarning, message);
      });
}

Accelerator::~Accelerator() {
  // Released here, outside the logger's lock, as `old` goes; never called after this.
  logging::Logger::Sink old = logger().replace_sink({});
}

bool Accelerator::check_trigger() {
  // Lowered before the reduction: a set_trigger that lands during it counts for the next check.
  const bool mine = trigger_.exchange(false);
  const at::Tensor flag = at::full({1}, mine ? 1 : 0, at::kInt);
  try {
    return ops::reduce(runtime().communicator(), flag, ops::Reduction::kMax).item<int>() > 0;
  } catch (...) {
    if (mine) trigger_.store(true);  // not seen by the others: keep it for a retry
    throw;
  }
}

void Accelerator::main_process_first_begin(bool local) {
  const bool first = local ? runtime().is_local_main_process() : runtime().is_main_process();
  if (!first) runtime().wait_for_everyone();
}

void Accelerator::main_process_first_end(bool local) {
  const bool first = local ? runtime().is_local_main_process() : runtime().is_main_process();
  if (first) runtime().wait_for_everyone();
}

void Accelerator::print(const std::string& message) const {
  if (!runtime().is_local_main_process()) return;
  std::fputs(message.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void Accelerator::log_message(int32_t level, uint32_t flags, const std::string& message) {
  if (level < 0 || level > logging::kMaxLevel)
    fail(Errc::invalid_argument, "log level " + std::to_string(level) + " is outside 0.." +
                                     std::to_string(logging::kMaxLevel));
  if (flags & ~(logging::kAllProcesses | logging::kInOrder))
    fail(Errc::invalid_argument, "unknown log flags " + std::to_string(flags));
  logging::Logger& log = logger();
  if (log.in_sink())
    fail(Errc::state, "accel_log_message called from inside the accelerator's log sink");
  if (!log.enabled(level)) return;
  const auto& place = runtime().place();
  if (!(flags & logging::kAllProcesses)) {
    if (place.rank == 0) log.write(level, flags, message);
  } else if ((flags & logging::kInOrder) && place.world_size > 1) {
    write_in_order(level, flags, message);
  } else {
    log.write(level, flags, message);
  }
}

// Every rank in turn, a barrier after each (Accelerate's in_order); a failure of this rank's sink
// is reported after the last barrier, so that the others are not left waiting.
void Accelerator::write_in_order(int32_t level, uint32_t flags, const std::string& message) {
  const auto& place = runtime().place();
  std::string failure;
  Errc code = Errc::callback;
  for (int32_t turn = 0; turn < place.world_size; ++turn) {
    if (turn == place.rank) {
      try {
        logger().write(level, flags, message);
      } catch (const Error& e) {
        failure = e.what();
        code = e.code();
      }
    }
    runtime().wait_for_everyone();
  }
  if (!failure.empty()) fail(code, failure);
}

void Accelerator::init_trackers(const std::string& project_name, const tracking::Values& config) {
  const auto& settings = runtime().settings();
  std::string dir = settings.text("logging_dir");
  if (dir.empty()) dir = settings.text("project_dir");
  run_->start(settings.text("log_with"), dir, project_name, config);
}

void Accelerator::save_state(const std::string* dir) {
  if (dir)
    checkpoint::save_state(*session_, *dir);
  else
    checkpoint::save_state_automatic(*session_);
}

void Accelerator::load_state(const std::string* dir) {
  if (dir)
    checkpoint::load_state(*session_, *dir);
  else
    checkpoint::load_state_automatic(*session_);
}

void Accelerator::save_model(const model::Model& model, const std::string& dir,
                             const std::string& max_shard_size) {
  model.require_filled("accel_save_model");                  // every rank alike, before the gathers
  const prepare::Session::WholeParameters whole(*session_);  // stage 3 gathers them
  checkpoint::save_model_from_main(runtime(), model, dir, max_shard_size);
}

void end_profile(runtime::Accelerator& runtime, profile::Profiler& profiler) {
  profiler.stop();
  const std::string& dir = profiler.options().output_trace_dir;
  if (dir.empty()) return;
  const int rank = runtime.place().rank;
  ops::run_on_all(runtime, [&] {
    make_directories(dir, 0755);
    write_file(dir + "/profile_" + std::to_string(rank) + ".json",
               profile::chrome_trace(profiler.events(), rank));
  });
  if (runtime.is_main_process())
    runtime.logger().say(logging::kInfo,
                         "profile: " + std::to_string(profiler.windows()) +
                             " window(s); the last:\n" +
                             profile::summary_table(profiler.events(), "cpu_time_total", 20));
}

}  // namespace accel
