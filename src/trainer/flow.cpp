#include "trainer/flow.hpp"

#include <cmath>

#include "common/error.hpp"
#include "trainer/python_json.hpp"

namespace accel::trainer {

void on_step_end(const TrainingArgs& args, const TrainerState& state, TrainerControl& control) {
  const auto step = state.global_step;
  if (step == 1 && args.logging_first_step) control.should_log = true;
  if (args.logging_strategy == Interval::steps && step % state.logging_steps == 0)
    control.should_log = true;
  if (args.eval_strategy == Interval::steps && step % state.eval_steps == 0 &&
      args.eval_delay <= static_cast<double>(step))
    control.should_evaluate = true;
  if (args.save_strategy == Interval::steps && state.save_steps > 0 && step % state.save_steps == 0)
    control.should_save = true;
  if (step >= state.max_steps) control.should_training_stop = true;
}

void on_epoch_end(const TrainingArgs& args, const TrainerState& state, TrainerControl& control) {
  if (args.logging_strategy == Interval::epoch) control.should_log = true;
  if (args.eval_strategy == Interval::epoch && state.epoch &&
      args.eval_delay <= state.epoch->value())
    control.should_evaluate = true;
  if (args.save_strategy == Interval::epoch) control.should_save = true;
}

double metric_to_check(const TrainingArgs& args, const std::map<std::string, double>& metrics) {
  const std::string key = args.metric_key();
  if (key.empty()) fail(Errc::invalid_argument, "trainer: metric_for_best_model is not set");
  const auto it = metrics.find(key);
  if (it != metrics.end()) return it->second;
  std::string there;
  for (const auto& [k, v] : metrics) there += (there.empty() ? "" : ", ") + k;
  fail(Errc::invalid_argument, "trainer: metric_for_best_model is '" + *args.metric_for_best_model +
                                   "', but the evaluation gave no '" + key +
                                   "'; its metrics: " + (there.empty() ? "(none)" : there));
}

namespace {

bool better(const TrainingArgs& args, double a, double b) {
  return args.greater_is_better.value_or(false) ? a > b : a < b;
}

}  // namespace

void EarlyStopping::on_evaluate(const TrainingArgs& args, const TrainerState& state,
                                const std::map<std::string, double>& metrics,
                                TrainerControl& control) {
  const double value = metric_to_check(args, metrics);
  if (!state.best_metric || (better(args, value, state.best_metric->value()) &&
                             std::fabs(value - state.best_metric->value()) > threshold_))
    counter_ = 0;
  else
    ++counter_;
  if (counter_ >= patience_) control.should_training_stop = true;
}

bool update_best(const TrainingArgs& args, TrainerState& state,
                 const std::map<std::string, double>* metrics, const std::string& checkpoint_dir) {
  if (!metrics || !args.metric_for_best_model) return false;
  const double value = metric_to_check(args, *metrics);
  if (state.best_metric && state.best_model_checkpoint &&
      !better(args, value, state.best_metric->value()))
    return false;
  state.best_metric = Number::of_real(value);
  state.best_model_checkpoint = checkpoint_dir;
  return true;
}

bool is_new_best(const TrainingArgs& args, const TrainerState& state,
                 const std::map<std::string, double>& metrics) {
  const double value = metric_to_check(args, metrics);
  return !state.best_metric || better(args, value, state.best_metric->value());
}

std::string checkpoint_dir(const TrainingArgs& args, const TrainerState& state) {
  std::string dir = args.output_dir;
  if (!dir.empty() && dir.back() != '/') dir += '/';  // os.path.join
  return dir + "checkpoint-" + std::to_string(state.global_step);
}

void LossWindow::add(float micro_loss, long long global_step) {
  if (std::isfinite(micro_loss))
    sum_ += micro_loss;
  else
    sum_ += sum_ / static_cast<float>(1 + global_step - last_logged_);
}

std::map<std::string, double> LossWindow::take(const TrainerState& state, const double* grad_norm,
                                               double learning_rate, const double* ranks_mean) {
  std::map<std::string, double> logs;
  const double sum = ranks_mean ? *ranks_mean : static_cast<double>(sum_);
  logs["loss"] = python_round4(sum / static_cast<double>(state.global_step - last_logged_));
  if (grad_norm) logs["grad_norm"] = *grad_norm;
  logs["learning_rate"] = learning_rate;
  sum_ = 0;
  last_logged_ = state.global_step;
  return logs;
}

double epoch_progress(long long epoch, long long batch, long long batches_in_epoch) {
  return static_cast<double>(epoch) +
         static_cast<double>(batch + 1) / static_cast<double>(batches_in_epoch);
}

}  // namespace accel::trainer
