// transformers' TrainerCallback events, in the C ABI's numbering (accel_trainer_event). Pure.
#pragma once

namespace accel::trainer {

enum class Event {
  init_end,
  train_begin,
  epoch_begin,
  step_begin,
  substep_end,
  pre_optimizer_step,
  optimizer_step,
  step_end,
  log,
  evaluate,
  save,
  epoch_end,
  train_end,
  predict,
  prediction_step,
};

constexpr int kEventCount = static_cast<int>(Event::prediction_step) + 1;

// transformers' method name ("on_step_end").
inline const char* event_name(Event e) {
  static const char* const names[kEventCount] = {
      "on_init_end",       "on_train_begin", "on_epoch_begin",
      "on_step_begin",     "on_substep_end", "on_pre_optimizer_step",
      "on_optimizer_step", "on_step_end",    "on_log",
      "on_evaluate",       "on_save",        "on_epoch_end",
      "on_train_end",      "on_predict",     "on_prediction_step"};
  return names[static_cast<int>(e)];
}

}  // namespace accel::trainer
