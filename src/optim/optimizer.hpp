// Optimizers over a model's parameters (LibTorch's SGD, Adam, AdamW, RMSprop, Adagrad) with options
// by key. Built lazily, so that prepare() can bind them to the parameters after device placement.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace accel::optim {

class Optimizer {
 public:
  // kind: sgd, adam, adamw, rmsprop, adagrad. Throws accel::Error(invalid_argument) otherwise.
  explicit Optimizer(const std::string& kind);
  ~Optimizer();

  // Options by key (lr, momentum, dampening, weight_decay, nesterov, beta1, beta2, eps, amsgrad,
  // alpha, centered, lr_decay, initial_accumulator_value; each kind takes its own subset). Applied
  // at once when the optimizer exists already.
  void set(const std::string& key, const std::string& value);
  double option(const std::string& key) const;

  // (Re)binds to `params` (keeps no state: call before the first step).
  void bind(std::vector<at::Tensor> params);
  // ZeRO stage 1: from now on steps (and keeps state for) only the parameters flagged, one flag
  // per params(); checkpoints' state for the others is checked but not kept. Before the first
  // step.
  void shard(const std::vector<bool>& owned);
  bool sharded() const { return std::find(owned_.begin(), owned_.end(), false) != owned_.end(); }
  bool bound() const { return static_cast<bool>(impl_); }
  const std::vector<at::Tensor>& params() const { return params_; }

  void step();
  // Accelerate's default: gradients set to None rather than to zero, except those `in_place`
  // zeroes itself and answers true for (gradients that are views of communication buckets).
  void zero_grad(const std::function<bool(const at::Tensor& param)>& in_place = nullptr);
  double lr() const { return option("lr"); }
  void set_lr(double lr);
  // For schedules that cycle momentum (one_cycle): momentum (SGD, RMSprop) or beta1 (Adam, AdamW).
  bool has_momentum() const;
  void set_momentum(double m);
  const std::string& kind() const { return kind_; }
  torch::optim::Optimizer& torch_optimizer();

  // For checkpoints: every option, and every per-parameter state tensor named "<index>.<field>"
  // (index into params(); "step" as an int64 scalar). Loading re-applies the options (LibTorch
  // 1.13's own Optimizer::load drops them) and replaces the state, checking shapes.
  const std::map<std::string, double>& options() const { return options_; }
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() const;
  // Loading is two-phase so that load_state changes nothing when any part of a checkpoint is bad:
  // stage_state checks every option (all present, known, finite, in range) and every state tensor
  // (its parameter, field, shape, step) and builds the new state without touching this optimizer;
  // it throws accel::Error naming the option or tensor. apply_state then swaps it in and cannot
  // fail.
  // The options part of stage_state alone: every option present, none unknown, each valid.
  void check_saved_options(const std::map<std::string, double>& options) const;
  struct StagedState;
  std::shared_ptr<StagedState> stage_state(
      const std::map<std::string, double>& options,
      const std::vector<std::pair<std::string, at::Tensor>>& tensors) const;
  void apply_state(StagedState& staged);

 private:
  void apply_options();
  void build(const std::vector<at::Tensor>& params);
  // Throws accel::Error(invalid_argument) naming `key` unless `v` is a valid value for it given
  // the other options in `all`: finite, not negative, betas and alpha below 1, flags 0 or 1.
  void check_option(const std::string& key, double v,
                    const std::map<std::string, double>& all) const;
  std::string kind_;
  std::map<std::string, double> options_;
  std::vector<at::Tensor> params_;
  std::vector<bool> owned_;  // which of params_ this rank steps
  std::unique_ptr<torch::optim::Optimizer> impl_;
};

}  // namespace accel::optim
