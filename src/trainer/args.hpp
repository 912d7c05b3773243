// The Trainer's settings, named and checked as transformers 4.40's TrainingArguments (the subset
// issue 52 uses), set from key=value text like libaccel's other options, and the step counts a
// run derives from them (Trainer._inner_training_loop's arithmetic). Pure: no LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accel::trainer {

// transformers' IntervalStrategy; `best` is the save strategy later transformers added (save
// when an evaluation gives a new best metric).
enum class Interval { no, steps, epoch, best };

const char* interval_name(Interval i);

struct TrainingArgs {
  long long max_steps = -1;  // > 0 wins over num_train_epochs
  double num_train_epochs = 3.0;
  Interval logging_strategy = Interval::steps;
  double logging_steps = 500;  // below 1: a fraction of max_steps (rounded up)
  bool logging_first_step = false;
  Interval eval_strategy = Interval::no;
  std::optional<double> eval_steps;  // unset or 0: logging_steps (under eval_strategy=steps)
  double eval_delay = 0;             // steps, or epochs under eval_strategy=epoch
  Interval save_strategy = Interval::steps;
  double save_steps = 500;
  std::optional<long long> save_total_limit;
  bool load_best_model_at_end = false;
  std::optional<std::string> metric_for_best_model;
  std::optional<bool> greater_is_better;
  long long early_stopping_patience = 0;  // 0: no early stopping
  double early_stopping_threshold = 0;
  long long gradient_accumulation_steps = 1;
  double max_grad_norm = 1.0;
  // transformers' auto_find_batch_size: train() under find_executable_batch_size, from the
  // training loader's batch size down (trainer_batch_size.cpp).
  bool auto_find_batch_size = false;
  std::string resume_from_checkpoint;  // "" none, "latest", or a checkpoint directory
  std::string output_dir = "trainer_output";
  // libaccel's: the runtime and rate figures transformers adds to train and evaluation logs
  // (train_runtime, eval_samples_per_second, ...); off, log_history and trainer_state.json are
  // the same from run to run.
  bool speed_metrics = true;
  // libaccel's: the main process's progress bar (transformers' disable_tqdm, inverted); on by
  // default when standard error is a terminal.
  std::optional<bool> progress_bar;
  // transformers' num_items_in_batch (switched on here; transformers decides it from the model's
  // signature): each window's batches are fetched first, their label tokens (labels_field, -1:
  // the last field; -100 is ignored) counted over the window and every rank, and the count given
  // to the step as one more field; the step returns its loss summed over tokens / that count.
  bool num_items_in_batch = false;
  long long labels_field = -1;

  // One setting; an unknown key or a bad value is an invalid_argument error naming both.
  void set(const std::string& key, const std::string& value);
  // Settings as "key=value" items separated by commas, semicolons or new lines.
  void set_all(const std::string& text);
  // TrainingArguments.__post_init__'s defaults and checks (same messages), then the early
  // stopping ones: a metric, evaluations, and saves that follow evaluations (the best metric is
  // recorded at those); load_best_model_at_end is not needed (transformers PR #35101). Call
  // once, after the last set().
  void finalize();

  // metric_for_best_model with the "eval_" prefix the Trainer adds ("" when unset).
  std::string metric_key() const;
};

// The counts a run derives (Trainer._inner_training_loop): batches_per_epoch is the training
// loader's length, absent for a loader without one (then max_steps must be set).
struct Plan {
  long long max_steps = 0;
  long long num_train_epochs = 0;
  long long update_steps_per_epoch = 0;
  long long logging_steps = 500;
  long long eval_steps = 500;
  long long save_steps = 500;
};

Plan make_plan(const TrainingArgs& args, std::optional<long long> batches_per_epoch);

// Where a run resumed at `global_step` picks up (Trainer._inner_training_loop): the epochs done,
// and the batches of the current epoch to skip (its update steps times the accumulation).
struct ResumePoint {
  long long epochs_trained = 0;
  long long batches_to_skip = 0;
};

ResumePoint resume_point(const TrainingArgs& args, const Plan& plan, long long global_step);

}  // namespace accel::trainer
