// transformers' TrainerState, written and read as its trainer_state.json: the same keys, the
// same order and number spelling (json.dumps(asdict(state), indent=2, sort_keys=True) + "\n").
// Pure: no LibTorch.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace accel::trainer {

// A Python number: int or float, each written as Python writes it ("0" vs "0.0").
struct Number {
  double real = 0;
  int64_t integer = 0;
  bool is_int = false;

  static Number of_int(int64_t v) { return {static_cast<double>(v), v, true}; }
  static Number of_real(double v) { return {v, 0, false}; }
  double value() const { return is_int ? static_cast<double>(integer) : real; }
  bool operator==(const Number& o) const {
    return is_int == o.is_int && (is_int ? integer == o.integer : real == o.real);
  }
};

// One log_history entry: the logged values, "step" and (when the state has one) "epoch".
using LogEntry = std::map<std::string, Number>;

struct TrainerState {
  std::optional<Number> epoch;  // float during training (Trainer sets the int 0 at its start)
  int64_t global_step = 0;
  int64_t max_steps = 0;
  int64_t logging_steps = 500;
  int64_t eval_steps = 500;
  int64_t save_steps = 500;
  std::optional<int64_t> train_batch_size;
  int64_t num_train_epochs = 0;
  int64_t num_input_tokens_seen = 0;
  Number total_flos = Number::of_int(0);
  std::vector<LogEntry> log_history;
  std::optional<Number> best_metric;
  std::optional<std::string> best_model_checkpoint;
  bool is_local_process_zero = true;
  bool is_world_process_zero = true;
  bool is_hyper_param_search = false;
  nlohmann::json trial_name;    // null (hyperparameter search is not libaccel's)
  nlohmann::json trial_params;  // null
  // Keys a newer transformers writes (stateful_callbacks, ...), kept so a file reads back whole.
  nlohmann::json extra = nlohmann::json::object();

  nlohmann::json to_json_value() const;
  // trainer_state.json's text, newline included.
  std::string to_json() const;
  // A trainer_state.json's text (transformers' or ours); a malformed one is an io error
  // naming the key.
  static TrainerState from_json(const std::string& text);

  // Trainer.log: the entry is the logs, "epoch" when the state has one, and "step".
  void append_log(const std::map<std::string, double>& logs);
};

}  // namespace accel::trainer
