// The Trainer's flow decisions, as transformers 4.40 makes them: TrainerControl,
// DefaultFlowCallback's on_step_end/on_epoch_end, EarlyStoppingCallback, and _save_checkpoint's
// best metric rule. Pure: no LibTorch.
#pragma once

#include <map>
#include <string>

#include "trainer/args.hpp"
#include "trainer/state.hpp"

namespace accel::trainer {

struct TrainerControl {
  bool should_training_stop = false;
  bool should_epoch_stop = false;
  bool should_save = false;
  bool should_evaluate = false;
  bool should_log = false;

  // CallbackHandler's resets: on_train_begin, on_epoch_begin, on_step_begin.
  void train_begin() { should_training_stop = false; }
  void epoch_begin() { should_epoch_stop = false; }
  void step_begin() { should_log = should_evaluate = should_save = false; }
};

// DefaultFlowCallback.on_step_end (state.global_step already advanced).
void on_step_end(const TrainingArgs& args, const TrainerState& state, TrainerControl& control);
// DefaultFlowCallback.on_epoch_end (state.epoch already advanced).
void on_epoch_end(const TrainingArgs& args, const TrainerState& state, TrainerControl& control);

// The metric metric_for_best_model names in an evaluation's metrics (the "eval_" prefix added).
// Missing, it is an invalid_argument error naming the metrics that were there; transformers
// 4.40 only warns and quietly stops early stopping (transformers #28530).
double metric_to_check(const TrainingArgs& args, const std::map<std::string, double>& metrics);

// EarlyStoppingCallback: counts the evaluations that did not improve on state.best_metric by
// more than the threshold; at the patience it sets should_training_stop.
class EarlyStopping {
 public:
  EarlyStopping(long long patience, double threshold)
      : patience_(patience), threshold_(threshold) {}
  // on_evaluate: call before the best metric is updated with these metrics (the Trainer's order).
  void on_evaluate(const TrainingArgs& args, const TrainerState& state,
                   const std::map<std::string, double>& metrics, TrainerControl& control);
  long long counter() const { return counter_; }
  void set_counter(long long c) { counter_ = c; }  // from a resumed run

 private:
  long long patience_;
  double threshold_;
  long long counter_ = 0;
};

// _save_checkpoint's rule: when the metrics are there and metric_for_best_model is set, a new
// best (strictly better, or none yet) becomes state.best_metric and its checkpoint the best.
// True when it did.
bool update_best(const TrainingArgs& args, TrainerState& state,
                 const std::map<std::string, double>* metrics, const std::string& checkpoint_dir);

// save_strategy=best's decision after an evaluation (later transformers' SaveStrategy.BEST):
// save when the metrics beat state.best_metric, or there is none yet.
bool is_new_best(const TrainingArgs& args, const TrainerState& state,
                 const std::map<std::string, double>& metrics);

// The checkpoint directory of the current step: output_dir/checkpoint-N.
std::string checkpoint_dir(const TrainingArgs& args, const TrainerState& state);

// The logged training loss and its companions (Trainer._maybe_log_save_evaluate): the summed
// loss since the last log divided by the steps since then, rounded to 4 places. The sum is fp32
// as transformers' tr_loss tensor is, so the logged figure is the same.
class LossWindow {
 public:
  // One micro-batch's loss (already divided by gradient_accumulation_steps, as the Trainer's
  // training_step returns it), global_step being the steps done before this one. A NaN or
  // infinite loss counts as the window's mean so far (logging_nan_inf_filter, on by default).
  void add(float micro_loss, long long global_step);
  float sum() const { return sum_; }
  // True when a log is due: should_log and a step has passed since the last log.
  bool due(const TrainerControl& control, const TrainerState& state) const {
    return control.should_log && state.global_step > last_logged_;
  }
  // The logs ("loss", "grad_norm" when given, "learning_rate") and the window restarted.
  // ranks_mean: the mean of every rank's sum() when there are several (the Trainer's gather).
  std::map<std::string, double> take(const TrainerState& state, const double* grad_norm,
                                     double learning_rate, const double* ranks_mean = nullptr);
  long long last_logged() const { return last_logged_; }
  void resume(long long global_step) { last_logged_ = global_step, sum_ = 0; }
  // A window saved mid-way (libaccel's exact resume; transformers restarts it at zero).
  void restore(float sum, long long last_logged) { sum_ = sum, last_logged_ = last_logged; }

 private:
  float sum_ = 0;
  long long last_logged_ = 0;
};

// The state's epoch after batch `batch` (0-based) of epoch `epoch` with `batches_in_epoch`
// batches: epoch + (batch + 1) / batches_in_epoch, as the Trainer sets it.
double epoch_progress(long long epoch, long long batch, long long batches_in_epoch);

}  // namespace accel::trainer
