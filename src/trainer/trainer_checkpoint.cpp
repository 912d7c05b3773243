// The Trainer's checkpoints: save (the accelerator's save_state plus trainer_state.json and the
// loop's position), rotation, resume, and the end of training (the best model, the final log).
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <dirent.h>
#include <sys/stat.h>

#include <chrono>

#include "accelerator/accelerator.hpp"
#include "checkpoint/atomic_dir.hpp"
#include "checkpoint/model_io.hpp"
#include "checkpoint/sharded_load.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "data/loader.hpp"
#include "model/model.hpp"
#include "ops/collectives.hpp"
#include "ops/main_process.hpp"
#include "prepare/session.hpp"
#include "trainer/python_json.hpp"
#include "trainer/rotation.hpp"
#include "trainer/trainer.hpp"
#include "trainer/trainer_loop.hpp"

namespace accel::trainer {

namespace {

bool is_dir(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The names of the directories in `dir` (none when it does not exist yet).
std::vector<std::string> subdirectories(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d))
      if (is_dir(dir + "/" + e->d_name)) names.emplace_back(e->d_name);
    closedir(d);
  }
  return names;
}

}  // namespace

std::string Trainer::save_loop_state() const {
  nlohmann::json j;
  const Loop* loop = loop_;
  j["epoch"] = loop ? loop->epoch : 0;
  j["batch"] = loop ? loop->batch : -1;
  j["epoch_done"] = loop ? loop->epoch_done : false;
  j["total_loss"] = loop ? loop->total_loss : 0.0;
  nlohmann::json sums = nlohmann::json::array();
  if (loop)
    for (float v : loop->rank_sums) sums.push_back(static_cast<double>(v));
  j["window_sums"] = sums;
  j["last_logged"] = window_.last_logged();
  j["early_stopping_counter"] = early_.counter();
  return j.dump(2) + "\n";
}

void Trainer::load_loop_state(Loop& loop) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(loaded_loop_);
    loop.epoch = j.at("epoch").get<long long>();
    loop.batch = j.at("batch").get<long long>();
    loop.epoch_done = j.at("epoch_done").get<bool>();
    loop.total_loss = j.at("total_loss").get<double>();
    const auto sums = j.at("window_sums").get<std::vector<double>>();
    const int world = acc_.runtime().place().world_size, rank = acc_.runtime().place().rank;
    float sum = 0;
    if (static_cast<int>(sums.size()) == world) {
      sum = static_cast<float>(sums[rank]);
    } else if (!sums.empty()) {  // another number of processes: each continues the mean
      for (double v : sums) sum += static_cast<float>(v);
      sum /= static_cast<float>(sums.size());
    }
    window_.restore(sum, j.at("last_logged").get<long long>());
    early_.set_counter(j.at("early_stopping_counter").get<long long>());
  } catch (const nlohmann::json::exception& e) {
    fail(Errc::io,
         std::string("trainer: the checkpoint's trainer_loop.json is malformed: ") + e.what());
  }
  loop.resumed_mid_epoch = !loop.epoch_done;
}

std::string Trainer::checkpoint_to_resume() const {
  std::string dir = args_.resume_from_checkpoint;
  if (dir == "latest") {
    const auto latest = latest_checkpoint(args_.output_dir, subdirectories(args_.output_dir));
    if (!latest)
      fail(Errc::invalid_argument, "trainer: resume_from_checkpoint=latest, but '" +
                                       args_.output_dir + "' holds no checkpoint-<step> directory");
    dir = *latest;
  }
  if (!is_dir(dir))
    fail(Errc::invalid_argument,
         "trainer: resume_from_checkpoint '" + dir + "' is not a directory");
  return dir;
}

void Trainer::resume(Loop& loop) {
  const std::string dir = checkpoint_to_resume();
  loaded_state_.reset();
  loaded_loop_.clear();
  acc_.load_state(&dir);
  TrainerState st = std::move(*loaded_state_);
  loaded_state_.reset();
  resume_point(args_, loop.plan, st.global_step);  // refuses a checkpoint past max_steps
  // What this run decides, as the Trainer sets it after loading the state.
  st.max_steps = state_.max_steps;
  st.num_train_epochs = state_.num_train_epochs;
  st.train_batch_size = state_.train_batch_size;
  st.is_world_process_zero = state_.is_world_process_zero;
  st.is_local_process_zero = state_.is_local_process_zero;
  state_ = std::move(st);
  const std::string warning = drop_stale_best(state_, is_dir);
  if (!warning.empty()) acc_.log_message(logging::kWarning, 0, warning);
  load_loop_state(loop);
  acc_.resume_trackers_at(state_.global_step);
  acc_.log_message(
      logging::kInfo, 0,
      "trainer: resumed from '" + dir + "' at step " + std::to_string(state_.global_step));
}

void Trainer::save_checkpoint(Loop& loop, const Metrics* metrics) {
  const std::string dir = checkpoint_dir(args_, state_);
  update_best(args_, state_, metrics, dir);
  if (auto* comm = acc_.runtime().communicator()) {
    const at::Tensor all = ops::gather(comm, at::full({1}, window_.sum(), at::kFloat)).contiguous();
    loop.rank_sums.assign(all.data_ptr<float>(), all.data_ptr<float>() + all.numel());
  } else {
    loop.rank_sums = {window_.sum()};
  }
  ops::run_on_main(acc_.runtime(), [&] { make_directories(args_.output_dir, 0777); });
  acc_.save_state(&dir);
  try_checkpoints_.push_back(dir);
  rotate(false);
}

void Trainer::rotate(bool at_end) {
  ops::run_on_main(acc_.runtime(), [&] {
    const auto names = subdirectories(args_.output_dir);
    const auto& best = state_.best_model_checkpoint;
    const auto doomed =
        at_end ? checkpoints_to_delete_at_end(args_.output_dir, names, best, args_.save_total_limit)
               : checkpoints_to_delete(args_.output_dir, names, best, args_.save_total_limit);
    for (const auto& path : doomed) {
      acc_.log_message(logging::kInfo, 0,
                       "Deleting older checkpoint [" + path + "] due to args.save_total_limit");
      checkpoint::remove_tree(path);
    }
  });
}

void Trainer::finish_training(Loop& loop) {
  auto& s = acc_.session();
  if (args_.load_best_model_at_end && state_.best_model_checkpoint) {
    // The model's file of the best checkpoint (its index among the prepared models).
    size_t index = 0;
    while (index < s.models().size() && s.models()[index] != objects_.model) ++index;
    const std::string path =
        *state_.best_model_checkpoint + "/model_" + std::to_string(index) + ".safetensors";
    acc_.log_message(logging::kInfo, 0,
                     "Loading best model from " + *state_.best_model_checkpoint +
                         " (score: " + python_float_repr(state_.best_metric->value()) + ").");
    checkpoint::load_planned(&s, *objects_.model, "load_best_model_at_end",
                             [&] { return checkpoint::plan_strict_load(*objects_.model, path); });
  }
  loop.progress->finish();
  loop.total_loss += window_.sum();  // transformers adds this rank's unlogged remainder
  Metrics metrics;
  if (args_.speed_metrics) {
    const double samples = static_cast<double>(state_.max_steps) *
                           static_cast<double>(objects_.train->batch_size()) *
                           args_.gradient_accumulation_steps * acc_.runtime().place().world_size;
    add_speed_metrics(metrics, "train", loop.start, samples, static_cast<double>(state_.max_steps));
  }
  metrics["train_loss"] =
      loop.total_loss / std::max(static_cast<double>(state_.global_step), 0.001);
  log(metrics);
  rotate(true);
  emit(Event::train_end);
}

}  // namespace accel::trainer
