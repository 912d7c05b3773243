// Optimizers over a model's parameters (LibTorch's SGD, Adam, AdamW, RMSprop, Adagrad) with options
// by key, in parameter groups as PyTorch's param_groups. Built lazily, so that prepare() can bind
// them to the parameters after device placement.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace accel::optim {

class Optimizer {
 public:
  // kind: sgd, adam, adamw, rmsprop, adagrad. Throws accel::Error(invalid_argument) otherwise.
  explicit Optimizer(const std::string& kind);
  // A program's own LibTorch optimizer, stepped as it is (foreign_optimizer.cpp): its options are
  // its own (set() takes lr alone, for schedules), its state is checkpointed when its class is
  // one of LibTorch's five, and ZeRO cannot shard it.
  explicit Optimizer(std::shared_ptr<torch::optim::Optimizer> program);
  ~Optimizer();
  bool foreign() const { return foreign_; }

  // Options by key (lr, momentum, dampening, weight_decay, nesterov, beta1, beta2, eps, amsgrad,
  // alpha, centered, lr_decay, initial_accumulator_value; each kind takes its own subset), of
  // group 0 and of the defaults that later groups start from. Applied at once when the optimizer
  // exists already.
  void set(const std::string& key, const std::string& value);
  // Group 0's option.
  double option(const std::string& key) const;

  // Parameter groups (PyTorch's param_groups). Group 0 holds every parameter no other group names;
  // a group made by add_group holds the parameters named (each in one group only) and starts from
  // the defaults of that moment; each group has its own options, which its parameters step with.
  // Every parameter of the model by name, with whether it is trainable, in the model's order:
  // bind() is given the trainable ones in this order. Needed by add_group.
  using ParameterNames = std::function<std::vector<std::pair<std::string, bool>>()>;
  void set_parameter_names(ParameterNames names) { names_ = std::move(names); }
  // A new group of the parameters `names` (accel::Error(invalid_argument) naming an unknown or
  // repeated name, or one in another group already; Error(state) once the optimizer stepped or a
  // scheduler drives it). Returns its index.
  size_t add_group(const std::vector<std::string>& names);
  size_t group_count() const { return groups_.size(); }
  // Group `group`'s option, as set() for group 0 alone (the defaults stay).
  void set_group(size_t group, const std::string& key, const std::string& value);
  double group_option(size_t group, const std::string& key) const;
  double group_lr(size_t group) const { return group_option(group, "lr"); }
  void set_group_lr(size_t group, double lr);
  // A group's base rate for schedulers (PyTorch's group["initial_lr"]), set by the scheduler made
  // over this optimizer; from then on no group can be added. Saved with the options.
  std::optional<double> initial_lr(size_t group) const { return checked_group(group).initial_lr; }
  void set_initial_lr(size_t group, double lr);

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
  bool stepped() const { return stepped_; }
  // Accelerate's default: gradients set to None rather than to zero, except those `in_place`
  // zeroes itself and answers true for (gradients that are views of communication buckets).
  void zero_grad(const std::function<bool(const at::Tensor& param)>& in_place = nullptr);
  // Group 0's rate; set_lr sets it and the defaults' (as set("lr", ...)).
  double lr() const { return option("lr"); }
  void set_lr(double lr);
  // For schedules that cycle momentum (one_cycle): momentum (SGD, RMSprop) or beta1 (Adam, AdamW),
  // of every group.
  bool has_momentum() const;
  void set_momentum(double m);
  const std::string& kind() const { return kind_; }
  torch::optim::Optimizer& torch_optimizer();

  // For checkpoints: every option, and every per-parameter state tensor named "<index>.<field>"
  // (index into params(); "step" as an int64 scalar). Loading re-applies the options (LibTorch
  // 1.13's own Optimizer::load drops them) and replaces the state, checking shapes. The options
  // are group 0's by their keys, and each later group g's as "group<g>.<key>", with
  // "group<g>.params" (its number of parameters, checked on load as PyTorch checks a group's size)
  // and "group<g>.initial_lr" once a scheduler set it.
  std::map<std::string, double> options() const;
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
  struct Group {
    std::vector<std::string> names;  // group 0: none (it holds what no other group names)
    std::map<std::string, double> options;
    std::optional<double> initial_lr;
  };
  struct SavedGroups;
  SavedGroups read_saved(const std::map<std::string, double>& options) const;
  const Group& checked_group(size_t group) const;
  double parse_option(const std::string& key, const std::string& value) const;
  void apply_options();
  void assign_groups();
  // Builds LibTorch's optimizer over the parameters flagged in owned_, in their groups.
  void build();
  // Throws accel::Error(invalid_argument) naming `key` unless `v` is a valid value for it given
  // the other options in `all`: finite, not negative, betas and alpha below 1, flags 0 or 1.
  void check_option(const std::string& key, double v, const std::map<std::string, double>& all,
                    const std::string& where) const;
  std::string kind_;
  std::map<std::string, double> defaults_;
  std::vector<Group> groups_;
  ParameterNames names_;
  std::vector<at::Tensor> params_;
  std::vector<size_t> group_of_;  // each of params_'s group
  std::vector<bool> owned_;       // which of params_ this rank steps
  // A program's optimizer: bound to parameters that must be its own, never rebuilt.
  void bind_foreign(std::vector<at::Tensor> params);
  void apply_foreign_lrs();
  std::shared_ptr<torch::optim::Optimizer> impl_;
  bool stepped_ = false;
  bool foreign_ = false;
};

}  // namespace accel::optim
