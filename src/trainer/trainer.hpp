// transformers' Trainer over the accelerator: the training loop (accumulation, clipping, optimizer
// and scheduler steps), logging, evaluation, prediction, checkpoints with rotation and the best
// model, early stopping and exact resume, with transformers' callback events. The flow decisions
// are src/trainer's pure rules; this file runs them on prepared objects.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainer/args.hpp"
#include "trainer/events.hpp"
#include "trainer/flow.hpp"
#include "trainer/state.hpp"

namespace accel {
class Accelerator;
namespace model {
class Model;
}
namespace optim {
class Optimizer;
class LrScheduler;
}  // namespace optim
namespace data {
class DataLoader;
}
namespace prepare {
class Session;
}
}  // namespace accel

namespace accel::trainer {

using Metrics = std::map<std::string, double>;

// One evaluation batch's result: the loss (undefined: none), the predictions and the labels
// (undefined: none), each with the batch's samples along dimension 0.
struct EvalOutput {
  at::Tensor loss, predictions, labels;
};

// The program's parts of a step; each empty one has its default (Trainer's constructor).
struct Steps {
  // A micro-batch's loss, a scalar with its graph. Default: the model's training_step method.
  std::function<at::Tensor(const std::vector<at::Tensor>& batch)> training_step;
  // Default: the model's eval_step method returning (loss, predictions), the labels being the
  // batch's last field.
  std::function<EvalOutput(const std::vector<at::Tensor>& batch)> eval_step;
  // Metrics of the gathered predictions and labels (every sample once); without it an
  // evaluation gives its loss alone.
  std::function<Metrics(const at::Tensor& predictions, const at::Tensor& labels)> compute_metrics;
};

// A callback sees each event with the state and the control, which it may change; `values` are
// the logs (log), the metrics (evaluate, predict), or null.
using Callback =
    std::function<void(Event, const TrainerState&, TrainerControl&, const Metrics* values)>;

// The prepared objects the Trainer drives; scheduler and eval may be null.
struct Objects {
  std::shared_ptr<model::Model> model;
  std::shared_ptr<optim::Optimizer> optimizer;
  std::shared_ptr<optim::LrScheduler> scheduler;
  std::shared_ptr<data::DataLoader> train;
  std::shared_ptr<data::DataLoader> eval;
};

struct Prediction {
  at::Tensor predictions, labels;  // every sample once, in dataset order
  Metrics metrics;                 // "test_"-prefixed
};

class Trainer {
 public:
  // `settings`: TrainingArgs' key=value text. gradient_accumulation_steps defaults to the
  // accelerator's and may not differ from it. Every object must be prepared on `acc`.
  // Throws accel::Error (invalid_argument, state).
  Trainer(Accelerator& acc, Objects objects, const std::string& settings, Steps steps);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  void add_callback(Callback callback) { callbacks_.push_back(std::move(callback)); }
  // Replace a step; an empty function puts the default back.
  void set_training_step(std::function<at::Tensor(const std::vector<at::Tensor>&)> step);
  void set_eval_step(std::function<EvalOutput(const std::vector<at::Tensor>&)> step);
  void set_compute_metrics(
      std::function<Metrics(const at::Tensor&, const at::Tensor&)> compute_metrics) {
    steps_.compute_metrics = std::move(compute_metrics);
  }
  // on_init_end: the C layer calls it once the program's callbacks are added.
  void init_end() { emit(Event::init_end); }

  // Trainer.train: from the start or, with resume_from_checkpoint, where the checkpoint left;
  // with auto_find_batch_size, at the largest batch size that fits (trainer_batch_size.cpp).
  void train();
  // Trainer.evaluate over the eval loader: "eval_loss" and compute_metrics', "eval_"-prefixed.
  Metrics evaluate();
  // Trainer.predict over `loader`.
  Prediction predict(data::DataLoader& loader);

  const TrainerState& state() const { return state_; }
  TrainerControl& control() { return control_; }
  const TrainingArgs& args() const { return args_; }

 private:
  struct Loop;  // one train() call's counters
  // One training at the loader's batch size (train() without auto_find_batch_size).
  void train_once();
  // auto_find_batch_size's retry: the failed try's checkpoints removed (`resumed`, the checkpoint
  // it resumed from, kept) and, from `start_dir` (null when resuming: the try resumes again),
  // everything as train() found it.
  void start_again(const std::string* start_dir, const std::string& resumed);
  void emit(Event e, const Metrics* values = nullptr);
  void begin_state(Loop& loop);
  void resume(Loop& loop);
  // resume_from_checkpoint's directory ("latest" found in output_dir).
  std::string checkpoint_to_resume() const;
  void run_epoch(Loop& loop, long long epoch);
  void run_windows(Loop& loop, long long epoch);
  at::Tensor label_tokens(const std::vector<std::vector<at::Tensor>>& window) const;
  // Who decides where an accumulation window ends: the accelerator (the plain loop), or the
  // Trainer's prefetched window (num_items_in_batch).
  enum class Window { accelerator, inner, last };
  void micro_step(Loop& loop, long long epoch, const std::vector<at::Tensor>& batch, Window window);
  void optimizer_update(Loop& loop, long long epoch);
  void log_save_evaluate(Loop& loop);
  bool update_would_be_best(const Metrics& metrics) const;
  void log(Metrics& logs);
  void save_checkpoint(Loop& loop, const Metrics* metrics);
  // save_total_limit's deletions: after a save, or the end of training's sweep.
  void rotate(bool at_end);
  void finish_training(Loop& loop);
  struct Gathered;
  Gathered run_evaluation(data::DataLoader& loader);
  Metrics metrics_of(const Gathered& g, const std::string& prefix) const;
  double ranks_mean(double value) const;
  // The checkpoint files of the Trainer's own (registered with the session while it lives).
  std::string save_loop_state() const;
  void load_loop_state(Loop& loop);

  Accelerator& acc_;
  // For the destructor, which may run after the accelerator is gone (the session outlives it).
  std::weak_ptr<prepare::Session> session_;
  Objects objects_;
  TrainingArgs args_;
  Steps steps_;
  std::vector<Callback> callbacks_;
  TrainerState state_;
  TrainerControl control_;
  LossWindow window_;
  EarlyStopping early_{0, 0};
  Loop* loop_ = nullptr;  // the running train()'s, for a save_state made by the program
  std::optional<TrainerState> loaded_state_;
  std::string loaded_loop_;
  std::vector<std::string> try_checkpoints_;  // the saves of the running train() try
};

}  // namespace accel::trainer
